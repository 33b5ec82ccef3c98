package contestants

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/etcddriver"
	_ "github.com/distlock/lock/pgadvisory"
	_ "github.com/distlock/lock/redisdriver"
	_ "github.com/distlock/lock/redlockdriver"
	_ "github.com/distlock/lock/zkdriver"

	"github.com/distlock/lock/bench/harness"
)

// ours is a distlock driver through the portable API, opened by URL at its
// defaults: fencing on, automatic refresh on, the driver's wake-up on release.
type ours struct{ lk *lock.Locker }

// openOurs opens a Locker on url; ttl 0 keeps the default (30 s).
func openOurs(url string) func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
	return func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
		var opts []lock.Option
		if ttl > 0 {
			opts = append(opts, lock.WithTTL(ttl))
		}
		lk, err := lock.Open(ctx, url, opts...)
		if err != nil {
			return nil, err
		}
		return ours{lk}, nil
	}
}

func (o ours) Acquire(ctx context.Context, key string) (harness.Release, error) {
	l, err := o.lk.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (o ours) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	l, err := o.lk.TryAcquire(ctx, key)
	if errors.Is(err, lock.ErrLocked) {
		return nil, harness.ErrBusy
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (o ours) Close() error { return o.lk.Close() }

// oursContestant is our driver for backend at url.
func oursContestant(backend, url string, srv *harness.Server, try bool) *harness.Contestant {
	return &harness.Contestant{
		Backend: backend, Name: oursLabel, Role: harness.Ours,
		Open: openOurs(url), TryUncontended: try, Refreshes: true, Server: srv,
	}
}
