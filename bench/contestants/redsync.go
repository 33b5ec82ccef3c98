package contestants

import (
	"context"
	"errors"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/bench/harness"
)

// redsyncLock is github.com/go-redsync/redsync/v4 over one server, or Redlock
// over several. Its defaults: expiry 8 s, 32 tries, a random retry delay of
// 50–250 ms; the tuned setting retries every 1 ms (still 32 tries: when they
// run out, Lock fails and the scenario counts a give-up and calls it again).
type redsyncLock struct {
	rs      *redsync.Redsync
	opts    []redsync.Option
	clients []*redis.Client
}

const redsyncTunedLabel = "redsync (tuned: 1 ms retry delay)"

func redsyncContestant(backend string, urls []string, srv *harness.Server, tuned bool) *harness.Contestant {
	c := &harness.Contestant{
		Backend: backend, Name: "redsync", Setting: "default: 50–250 ms retry delay", Role: harness.Peer,
		TryUncontended: true, Server: srv,
	}
	if tuned {
		c.Setting = "tuned: 1 ms retry delay"
	}
	c.Open = func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
		r := &redsyncLock{}
		var pools []redsyncredis.Pool
		for _, u := range urls {
			rc, err := newRedisClient(u)
			if err != nil {
				_ = r.Close()
				return nil, err
			}
			r.clients = append(r.clients, rc)
			pools = append(pools, goredis.NewPool(rc))
		}
		r.rs = redsync.New(pools...)
		if ttl > 0 {
			r.opts = append(r.opts, redsync.WithExpiry(ttl))
		}
		if tuned {
			r.opts = append(r.opts, redsync.WithRetryDelay(time.Millisecond))
		}
		return r, nil
	}
	return c
}

func (r *redsyncLock) Acquire(ctx context.Context, key string) (harness.Release, error) {
	m := r.rs.NewMutex(key, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() == nil && taken(err) {
			return nil, harness.ErrGaveUp
		}
		return nil, err
	}
	return unlocker(m), nil
}

func (r *redsyncLock) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	m := r.rs.NewMutex(key, r.opts...)
	if err := m.TryLockContext(ctx); err != nil {
		if taken(err) {
			return nil, harness.ErrBusy
		}
		return nil, err
	}
	return unlocker(m), nil
}

func unlocker(m *redsync.Mutex) harness.Release {
	return func(ctx context.Context) error {
		_, err := m.UnlockContext(ctx)
		return err
	}
}

// taken says that err is redsync's "held elsewhere": ErrFailed, or the
// ErrTaken/ErrNodeTaken it returns when the last try found the key held.
func taken(err error) bool {
	var t *redsync.ErrTaken
	var nt *redsync.ErrNodeTaken
	return errors.Is(err, redsync.ErrFailed) || errors.As(err, &t) || errors.As(err, &nt)
}

func (r *redsyncLock) Close() error {
	var errs []error
	for _, c := range r.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
