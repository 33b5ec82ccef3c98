package etcddriver_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/lock"
)

// Goroutines of one Locker share one lease, which names etcd's keys; they must
// still exclude each other, and tokens must still grow.
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

// The first request of a lease on a key has exactly etcd's name for it,
// <LockPrefix>/<lease hex>; a second request of the same lease while the first is
// there queues under <lease hex>_1, in the same range.
func TestKeyNamesFollowEtcdLayout(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	admin := newClient(t, url)
	l := mustAcquire(t, lk, "k")
	waiting := make(chan error, 1)
	go func() {
		l2, err := lk.Acquire(ctx, "k")
		if err == nil {
			err = l2.Release(ctx)
		}
		waiting <- err
	}()
	queued(t, admin, d, "k", 2)
	resp, err := admin.Get(ctx, d.LockPrefix("k")+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	lease := fmt.Sprintf("%x", int64(d.Leases()[0]))
	want := []string{d.LockPrefix("k") + "/" + lease, d.LockPrefix("k") + "/" + lease + "_1"}
	for i, kv := range resp.Kvs {
		if string(kv.Key) != want[i] {
			t.Errorf("key %d is %q, want %q", i, kv.Key, want[i])
		}
		if kv.Lease != int64(d.Leases()[0]) {
			t.Errorf("key %q has lease %x", kv.Key, kv.Lease)
		}
	}
	if uint64(resp.Kvs[0].CreateRevision) != l.Token() {
		t.Errorf("token %d, the key's create revision %d", l.Token(), resp.Kvs[0].CreateRevision)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
}
