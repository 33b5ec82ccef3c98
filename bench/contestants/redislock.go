package contestants

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"

	"github.com/distlock/lock/bench/harness"
)

// bsmLock is github.com/bsm/redislock: SET NX PX with a random token and a
// compare-and-delete release. Its default RetryStrategy makes one attempt
// (NoRetry); the tuned setting polls every 1 ms (LinearBackoff), which Obtain
// keeps doing until the context or the TTL runs out.
type bsmLock struct {
	c     *redislock.Client
	close func() error
	ttl   time.Duration
	opt   *redislock.Options
}

func redislockContestant(url string, srv *harness.Server, tuned bool) *harness.Contestant {
	c := &harness.Contestant{
		Backend: Redis, Name: "bsm/redislock", Setting: "default: no retry", Role: harness.Peer,
		TryUncontended: true, Server: srv,
		NA: map[harness.Scenario]string{
			harness.Contended: "at its default (NoRetry) Obtain makes one attempt and never waits; see the tuned setting",
		},
	}
	if tuned {
		c.Setting, c.NA = "tuned: 1 ms linear backoff", nil
	}
	c.Open = func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
		rc, err := newRedisClient(url)
		if err != nil {
			return nil, err
		}
		b := &bsmLock{c: redislock.New(rc), close: rc.Close, ttl: ttlOr(ttl, defaultTTL)}
		if tuned {
			b.opt = &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
		}
		return b, nil
	}
	return c
}

func (b *bsmLock) Acquire(ctx context.Context, key string) (harness.Release, error) {
	l, err := b.c.Obtain(ctx, key, b.ttl, b.opt)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, harness.ErrGaveUp
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (b *bsmLock) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	l, err := b.c.Obtain(ctx, key, b.ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, harness.ErrBusy
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (b *bsmLock) Close() error { return b.close() }
