package zkdriver_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// The driver keeps the layout of Apache Curator's InterProcessMutex, which
// go-zookeeper's zk.Lock shares: protected ephemeral sequential "lock-" nodes
// under the lock path, ordered by the sequence after "lock-", each waiter
// watching its predecessor. So a zk.Lock on Driver.LockPath(key), a client no
// one here wrote, and the driver exclude each other, both ways and under
// contention.
func TestExcludesGoZookeeperLockOnTheSamePath(t *testing.T) {
	base := testserver.ZooKeeper(t)
	url := base + "?prefix=" + zkdriver.EscapeName(t.Name())
	lk, d := mustOpen(t, url)
	conn := zkConn(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := d.LockPath("payments")
	acl := zk.WorldACL(zk.PermAll)

	t.Run("ZkLockHoldsDriverWaits", func(t *testing.T) {
		zl := zk.NewLock(conn, path, acl)
		if err := zl.Lock(); err != nil {
			t.Fatal(err)
		}
		if _, err := lk.TryAcquire(ctx, "payments"); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TryAcquire while zk.Lock holds = %v, want ErrLocked", err)
		}
		var unlocked atomic.Bool
		got := make(chan error, 1)
		go func() {
			l, err := lk.Acquire(ctx, "payments")
			if err == nil && !unlocked.Load() {
				err = errors.New("acquired while zk.Lock held the lock")
			}
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		// Unlock once the driver's node is queued behind zk.Lock's.
		waitUntil(t, 10*time.Second, "the driver's waiter queued", func() bool {
			return len(children(t, conn, path)) == 2
		})
		unlocked.Store(true)
		if err := zl.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("DriverHoldsZkLockWaits", func(t *testing.T) {
		l, err := lk.Acquire(ctx, "payments")
		if err != nil {
			t.Fatal(err)
		}
		var released atomic.Bool
		got := make(chan error, 1)
		go func() {
			zl := zk.NewLock(conn, path, acl)
			err := zl.Lock()
			if err == nil && !released.Load() {
				err = errors.New("zk.Lock acquired while the driver held the lock")
			}
			if err == nil {
				err = zl.Unlock()
			}
			got <- err
		}()
		// Release once zk.Lock's node is queued behind the driver's.
		waitUntil(t, 10*time.Second, "zk.Lock's waiter queued", func() bool {
			return len(children(t, conn, path)) == 2
		})
		released.Store(true)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("MixedContention", func(t *testing.T) {
		lk2, _ := mustOpen(t, url)
		conn2 := zkConn(t, base)
		var inside atomic.Int32
		var ours, theirs atomic.Int32
		critical := func() {
			if n := inside.Add(1); n != 1 {
				t.Errorf("%d holders at once", n)
			}
			time.Sleep(time.Millisecond)
			inside.Add(-1)
		}
		const rounds = 15
		var wg sync.WaitGroup
		for _, l := range []*lock.Locker{lk, lk2} {
			for g := 0; g < 2; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < rounds; i++ {
						h, err := l.Acquire(ctx, "payments")
						if err != nil {
							t.Error(err)
							return
						}
						critical()
						ours.Add(1)
						if err := h.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		for _, c := range []*zk.Conn{conn, conn2} {
			for g := 0; g < 2; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					zl := zk.NewLock(c, path, acl) // not safe for concurrent use: one each
					for i := 0; i < rounds; i++ {
						if err := zl.Lock(); err != nil {
							t.Error(err)
							return
						}
						critical()
						theirs.Add(1)
						if err := zl.Unlock(); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		if ours.Load() != 4*rounds || theirs.Load() != 4*rounds {
			t.Errorf("critical sections: %d by the driver, %d by zk.Lock; want %d each", ours.Load(), theirs.Load(), 4*rounds)
		}
	})
}
