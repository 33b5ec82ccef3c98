package contestants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/etcddriver"
	_ "github.com/distlock/lock/filedriver"
	_ "github.com/distlock/lock/memdriver"
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

// AcquireWatched implements harness.Watcher with the Lock's Lost channel.
func (o ours) AcquireWatched(ctx context.Context, key string) (harness.Release, harness.Loss, error) {
	l, err := o.lk.Acquire(ctx, key)
	if err != nil {
		return nil, harness.Loss{}, err
	}
	return l.Release, harness.Loss{Done: l.Lost(), Cause: l.Err}, nil
}

var (
	_ harness.Watcher = ours{}
	_ harness.Expirer = ours{}
)

// Expires implements harness.Expirer with Inspect: the backend's own record of
// when the key's validity ends (zero for a free key).
func (o ours) Expires(ctx context.Context, key string) (time.Time, error) {
	in, err := o.lk.Inspect(ctx, key)
	if err != nil {
		return time.Time{}, err
	}
	return in.Expires, nil
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

// AcquireRW takes a shared (read) or exclusive lock. A driver without shared
// locks (Capabilities().Shared false) is harness.ErrUnsupported: the scenario
// is n/a for it, so that drivers gaining the shape join the comparison
// without a change here.
func (o ours) AcquireRW(ctx context.Context, key string, shared bool) (harness.Release, error) {
	if !o.lk.Capabilities().Shared {
		return nil, fmt.Errorf("%w: the driver has no shared locks yet (Capabilities().Shared is false)", harness.ErrUnsupported)
	}
	return o.take(ctx, key, lock.WithShared(shared))
}

// AcquirePermit takes one of permits permits of key; harness.ErrUnsupported on
// a driver without semaphores, as for AcquireRW.
func (o ours) AcquirePermit(ctx context.Context, key string, permits int) (harness.Release, error) {
	if !o.lk.Capabilities().Permits {
		return nil, fmt.Errorf("%w: the driver has no semaphores yet (Capabilities().Permits is false)", harness.ErrUnsupported)
	}
	return o.take(ctx, key, lock.WithPermits(permits))
}

// take acquires with opt. A driver whose Capabilities claim the shape but
// which refuses it anyway (lock.ErrUnsupported, a documented limit) is n/a
// too, with the driver's words.
func (o ours) take(ctx context.Context, key string, opt lock.Option) (harness.Release, error) {
	l, err := o.lk.Acquire(ctx, key, opt)
	if errors.Is(err, lock.ErrUnsupported) {
		return nil, fmt.Errorf("%w: %v", harness.ErrUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// shapeOnlyNA marks a contestant that is in the read-write and semaphore
// comparison only.
func shapeOnlyNA(why string) map[harness.Scenario]string {
	na := map[harness.Scenario]string{}
	for _, s := range harness.MutexScenarios {
		na[s] = why
	}
	return na
}

// oursLocal is our in-process or file driver: no server and no peer, so it
// runs the shape scenarios only, as the reference the network drivers are
// read against.
func oursLocal(backend, url string) *harness.Contestant {
	c := oursContestant(backend, url, &harness.Server{}, true)
	if backend == Mem {
		c.Elector = nil // one process: no leader process to kill
	}
	c.NA = shapeOnlyNA("no server and no peer library: this backend is in the shape scenarios only")
	return c
}

// oursContestant is our driver for backend at url.
func oursContestant(backend, url string, srv *harness.Server, try bool) *harness.Contestant {
	return &harness.Contestant{
		Backend: backend, Name: oursLabel, Role: harness.Ours,
		Open: openOurs(url), TryUncontended: try, Refreshes: true, Server: srv,
		Elector: oursElector(backend, url), NoLateness: noLateness[backend],
	}
}

// Why the scale scenario cannot time refreshes from the server's side, per
// backend ("" for Redis and Redlock, whose keys expire on their own and whose
// Inspect reads the expiry to the millisecond).
const (
	noLatenessEtcd = "one lease keep-alive per client keeps every lock, and etcd reports a lease's remaining TTL in whole seconds, too coarse to time it"
	noLatenessZK   = "the session's heartbeat keeps every lock: a lock has no expiry of its own to refresh"
)

var noLateness = map[string]string{
	Postgres:  "session advisory locks: nothing to refresh (the connection holds them)",
	Etcd:      noLatenessEtcd,
	ZooKeeper: noLatenessZK,
	Mem:       "no server",
	File:      "flock: nothing to refresh (the open file holds it)",
}
