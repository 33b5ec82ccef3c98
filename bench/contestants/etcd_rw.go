package contestants

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/distlock/lock/bench/harness"
)

// etcdRWMutex is etcd's own read-write lock, recipe.RWMutex from the client
// module's experimental/recipes, on one session per client at its defaults
// (TTL 60 s, kept alive by the client): a key per request under the lock's
// prefix, a reader waiting on the last earlier writer, a writer on the last
// earlier key of either kind, by watch. It takes no context: a waiting
// RLock or Lock ends only when it holds (the harness counts such late
// acquisitions as waits only). Each acquisition has its own RWMutex, as the
// recipe keeps the holder's key in it.
type etcdRWMutex struct {
	noTry
	c *clientv3.Client
	s *concurrency.Session
}

func etcdRWMutexContestant(url string, srv *harness.Server) *harness.Contestant {
	na := shapeOnlyNA("a read-write lock only; etcd's mutex is concurrency.Mutex, above")
	na[harness.Semaphore] = "etcd's client has no semaphore (neither concurrency nor experimental/recipes has one)"
	return &harness.Contestant{
		Backend: Etcd, Name: "recipe.RWMutex", Setting: "default", Role: harness.Peer,
		Refreshes: true, Server: srv, NA: na,
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			c, err := newEtcdClient(url)
			if err != nil {
				return nil, err
			}
			var opts []concurrency.SessionOption
			if ttl > 0 {
				opts = append(opts, concurrency.WithTTL(int((ttl+time.Second-1)/time.Second)))
			}
			s, err := concurrency.NewSession(c, opts...)
			if err != nil {
				c.Close()
				return nil, err
			}
			return &etcdRWMutex{c: c, s: s}, nil
		},
	}
}

func (e *etcdRWMutex) Acquire(context.Context, string) (harness.Release, error) {
	return nil, fmt.Errorf("%w: a read-write lock only", harness.ErrUnsupported)
}

func (e *etcdRWMutex) AcquireRW(ctx context.Context, key string, shared bool) (harness.Release, error) {
	m := recipe.NewRWMutex(e.s, "/bench-rwmutex/"+key)
	lock, unlock := m.Lock, m.Unlock
	if shared {
		lock, unlock = m.RLock, m.RUnlock
	}
	if err := lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return unlock() }, nil
}

func (e *etcdRWMutex) Close() error {
	_ = e.s.Close()
	return e.c.Close()
}
