package etcddriver_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/lock"
)

// Goroutines of one Locker share one lease, so their etcd key would have one
// name; they must still exclude each other, and tokens must still grow.
func TestGoroutinesSharingOneLeaseExcludeEachOther(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	const goroutines, rounds = 6, 15
	var (
		inside atomic.Int32
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := lk.Acquire(ctx, "shared-lease")
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != goroutines*rounds {
		t.Fatalf("%d critical sections, want %d", len(tokens), goroutines*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d", tokens[i], tokens[i-1])
		}
	}
	if n := len(d.Leases()); n != 1 {
		t.Errorf("the Locker used %d leases, want 1", n)
	}
}

// The hazard the in-process queue exists for, shown on etcd's own
// concurrency.Mutex: two goroutines with one shared session both "hold" the lock
// at once, because their key has the same name. (If this ever fails, etcd fixed
// it; the driver's test above does not depend on it.)
func TestConcurrencyMutexWithSharedSessionLetsTwoGoroutinesHold(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := concurrency.NewSession(newClient(t, url))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	name := testPrefix(t) + "/k"
	m1, m2 := concurrency.NewMutex(s, name), concurrency.NewMutex(s, name)
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
	defer lcancel()
	if err := m2.Lock(lctx); err != nil {
		t.Fatalf("second Mutex on the shared session waited (%v): the hazard is gone", err)
	}
	t.Log("concurrency.Mutex: two goroutines on one session hold the same lock at once")
	_ = m1.Unlock(ctx)
}
