package zkdriver_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// The benchmarks run the driver and go-zookeeper's zk.Lock against the same
// server in one binary, as sub-benchmarks that -count interleaves, so their
// ratio is measured under the same conditions. zk.Lock is the baseline the
// driver must match: it does the same recipe without context, fencing, loss
// detection or container key nodes.

const (
	benchGoroutines = 8
	benchClients    = 2
)

var benchRun = time.Now().UnixNano()

// Contended: 8 goroutines over 2 clients (each its own session) take turns on
// one key; handoffs/s is the rate of acquisitions.
func BenchmarkContended(b *testing.B) {
	url := testserver.ZooKeeper(b)
	prefix := fmt.Sprintf("bench-%d", benchRun)
	b.Run("driver=zkdriver", func(b *testing.B) {
		var lockers []*lock.Locker
		for range benchClients {
			lk, _ := mustOpen(b, url+"?prefix="+prefix)
			lockers = append(lockers, lk)
		}
		key := fmt.Sprintf("contended-%d", b.N)
		ctx := context.Background()
		contend(b, func(g int) func() error {
			lk := lockers[g%benchClients]
			return func() error {
				l, err := lk.Acquire(ctx, key)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		})
	})
	b.Run("driver=zk.Lock", func(b *testing.B) {
		var conns []*zk.Conn
		for range benchClients {
			conns = append(conns, zkConn(b, url))
		}
		path := fmt.Sprintf("/bench-zklock-%d/contended-%d", benchRun, b.N)
		contend(b, func(g int) func() error {
			zl := zk.NewLock(conns[g%benchClients], path, zk.WorldACL(zk.PermAll)) // one per goroutine: not safe for concurrent use
			return func() error {
				if err := zl.Lock(); err != nil {
					return err
				}
				return zl.Unlock()
			}
		})
	})
}

// contend runs b.N lock-unlock rounds spread over benchGoroutines goroutines
// and reports the rate.
func contend(b *testing.B, newRound func(g int) func() error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	rounds := make([]func() error, benchGoroutines)
	for g := range rounds {
		rounds[g] = newRound(g)
	}
	b.ResetTimer()
	for g := range benchGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := rounds[g](); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
}

// FirstLockFreshKey: the time to take a lock on a key never used before, which
// includes making its key node; the release is not timed.
func BenchmarkFirstLockFreshKey(b *testing.B) {
	url := testserver.ZooKeeper(b)
	prefix := fmt.Sprintf("bench-%d", benchRun)
	ctx := context.Background()
	b.Run("driver=zkdriver", func(b *testing.B) {
		lk, _ := mustOpen(b, url+"?prefix="+prefix)
		b.ResetTimer()
		for i := range b.N {
			l, err := lk.Acquire(ctx, fmt.Sprintf("fresh-%d-%d", b.N, i))
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("driver=zk.Lock", func(b *testing.B) {
		conn := zkConn(b, url)
		root := fmt.Sprintf("/bench-zklock-%d", benchRun) // exists, as the driver's prefix node does
		if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			zl := zk.NewLock(conn, fmt.Sprintf("%s/%s", root, zkdriver.EscapeName(fmt.Sprintf("fresh-%d-%d", b.N, i))), zk.WorldACL(zk.PermAll))
			if err := zl.Lock(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := zl.Unlock(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// HotKey: one client locks and unlocks a key that is in use (its key node
// exists), with nobody else: the round trips of an uncontended lock.
func BenchmarkHotKey(b *testing.B) {
	url := testserver.ZooKeeper(b)
	prefix := fmt.Sprintf("bench-%d", benchRun)
	ctx := context.Background()
	b.Run("driver=zkdriver", func(b *testing.B) {
		lk, _ := mustOpen(b, url+"?prefix="+prefix)
		for range b.N {
			l, err := lk.Acquire(ctx, "hot")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("driver=zk.Lock", func(b *testing.B) {
		zl := zk.NewLock(zkConn(b, url), fmt.Sprintf("/bench-zklock-%d/hot", benchRun), zk.WorldACL(zk.PermAll))
		for range b.N {
			if err := zl.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := zl.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Sets of keys (conformance.BenchmarkSets): ZooKeeper takes them one at a
// time (each key's queue is a node of its own).
func BenchmarkSets(b *testing.B) {
	url := testserver.ZooKeeper(b) + "?prefix=" + fmt.Sprintf("bench-sets-%d", benchRun)
	conformance.BenchmarkSets(b, conformance.Harness{
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return openDriver(ctx, url) },
	})
}
