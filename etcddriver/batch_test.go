package etcddriver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// Many locks refreshed together are confirmed in batches of at most 128 keys per
// transaction, each lock on its own: a deleted key fails only its lock.
func TestRefreshBatchConfirmsEachLock(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	const n = 300
	reqs := holdMany(ctx, t, d, n)
	gone := map[int]bool{7: true, 150: true, 299: true}
	admin := newClient(t, url)
	for i := range gone {
		if _, err := admin.Delete(ctx, d.LockPrefix(reqs[i].Key)+"/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	foreign := &driver.Request{Key: "k1", Owner: "someone else", TTL: 5 * time.Second}
	errs := d.RefreshBatch(ctx, append(reqs, foreign))
	for i, err := range errs[:n] {
		switch {
		case gone[i] && !errors.Is(err, driver.ErrNotHeld):
			t.Errorf("lock %d, whose key was deleted: %v, want ErrNotHeld", i, err)
		case !gone[i] && err != nil:
			t.Errorf("lock %d: %v", i, err)
		}
	}
	if !errors.Is(errs[n], driver.ErrNotHeld) {
		t.Errorf("foreign owner: %v, want ErrNotHeld", errs[n])
	}
	for i, req := range reqs {
		if gone[i] {
			continue
		}
		if err := d.Release(ctx, req); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
}

// Locks held longer than their TTL through the Locker stay held: the portable
// layer refreshes them in batches.
func TestManyLocksStayHeldPastTheirTTL(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, d := newLocker(t, url)
	ttl := d.Capabilities().MinTTL
	var held []*lock.Lock
	for i := 0; i < 200; i++ {
		l, err := lk.TryAcquire(ctx, fmt.Sprint("k", i), lock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	time.Sleep(ttl*2 + ttl/2) // time must pass: the property is outliving the TTL
	other, _ := newLocker(t, url)
	for _, l := range held {
		if isClosed(l.Lost()) {
			t.Fatalf("%s lost while refreshed", l.Key())
		}
		if _, err := other.TryAcquire(ctx, l.Key(), lock.WithTTL(ttl)); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TryAcquire(%s) by another client = %v, want ErrLocked", l.Key(), err)
		}
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Thousands of locks held through one Locker with a short TTL stay held: their
// refresh batches, thousands of keys each, are confirmed within the validity
// left to them (issue 23: one transaction after another, each behind a lease
// keepalive, took longer, and locks were lost for being many).
func TestThousandsOfLocksStayHeldPastTheirTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("holds thousands of locks for several TTLs")
	}
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lk, d := newLocker(t, url)
	ttl := d.Capabilities().MinTTL
	const n, workers = 4000, 32
	held := make([]*lock.Lock, n)
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				// Acquire, not TryAcquire: on a loaded machine a grant can
				// arrive too late to trust (ErrUnavailable), which Acquire rides
				// out; the property is what happens after the locks are held.
				l, err := lk.Acquire(ctx, fmt.Sprint("k", i), lock.WithTTL(ttl))
				if err != nil {
					errc <- err
					return
				}
				held[i] = l
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl * 3) // time must pass: the property is outliving the TTL
	lost := 0
	for _, l := range held {
		if isClosed(l.Lost()) {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d locks lost while refreshed, TTL %v", lost, n, ttl)
	}
	other, _ := newLocker(t, url)
	for _, l := range held[:100] {
		if isClosed(l.Lost()) {
			continue
		}
		if _, err := other.TryAcquire(ctx, l.Key(), lock.WithTTL(ttl)); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TryAcquire(%s) by another client = %v, want ErrLocked", l.Key(), err)
		}
	}
	for _, l := range held {
		_ = l.Release(ctx) // a lost lock's release fails; the count above is the property
	}
}

// A batch whose key range is filled with other keys (other clients' locks,
// waiters) is still confirmed lock by lock: the range read gives way to reads
// of its own keys, and a lock whose key was deleted is reported lost.
func TestRefreshBatchAmongManyOtherKeysConfirmsEachLock(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	admin := newClient(t, url)
	// 3,000 keys of others between the locks' keys, in the same ranges.
	for i := 0; i < 3000; i += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s/other%04d", d.LockPrefix("k1"), j), "someone else"))
		}
		if _, err := admin.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	reqs := make([]*driver.Request, 4)
	for i := range reqs {
		reqs[i] = &driver.Request{Key: fmt.Sprint("k", i), Owner: fmt.Sprint("o", i), TTL: 5 * time.Second, Lost: driver.LostFunc(func(error) {})}
		_, err := d.TryAcquire(ctx, reqs[i])
		switch {
		case i == 1 && !errors.Is(err, driver.ErrLocked):
			t.Fatalf("TryAcquire(k1), among the others' keys: %v, want ErrLocked", err)
		case i != 1 && err != nil:
			t.Fatal(err)
		}
	}
	if _, err := admin.Delete(ctx, d.LockPrefix("k3")+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	errs := d.RefreshBatch(ctx, reqs)
	for i, want := range []error{nil, driver.ErrNotHeld, nil, driver.ErrNotHeld} {
		if want == nil && errs[i] != nil || want != nil && !errors.Is(errs[i], want) {
			t.Errorf("lock k%d: %v, want %v", i, errs[i], want)
		}
	}
}

// A batch that holds few of a Driver's locks is spread over the key space
// among the others: it is read key by key (no range read, which would walk
// every lock's key in between), and each lock is still confirmed on its own.
func TestSparseRefreshBatchIsReadKeyByKeyAndConfirmsEachLock(t *testing.T) {
	s := testserver.StartEtcd(t) // a private server: the Range count is ours
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := newDriver(t, s.URL(), etcddriver.WithPrefix(testPrefix(t)))
	const n = 600
	reqs := holdMany(ctx, t, d, n)
	var batch []*driver.Request
	for i := 0; i < n; i += 50 {
		batch = append(batch, reqs[i])
	}
	const ranges = `grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"}`
	before := metric(t, s, ranges)
	for i, err := range d.RefreshBatch(ctx, batch) {
		if err != nil {
			t.Fatalf("lock %s: %v", batch[i].Key, err)
		}
	}
	if got := metric(t, s, ranges) - before; got != 0 {
		t.Errorf("a batch of %d of %d locks sent %v range reads, want none (key by key)", len(batch), n, got)
	}

	// Deleted and replaced keys fail only their own locks.
	refreshFailsOnlyDeletedAndReplaced(ctx, t, s.URL(), d, batch, batch[1], batch[5])
}

// refreshFailsOnlyDeletedAndReplaced deletes deleted's key, puts another
// value without a lease on replaced's (an operator's doing), and checks that
// a refresh of batch fails those two locks, with their causes, and no other.
func refreshFailsOnlyDeletedAndReplaced(ctx context.Context, t *testing.T, url string, d *etcddriver.Driver, batch []*driver.Request, deleted, replaced *driver.Request) {
	t.Helper()
	admin := newClient(t, url)
	if _, err := admin.Delete(ctx, d.LockPrefix(deleted.Key)+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	kv, err := admin.Get(ctx, d.LockPrefix(replaced.Key)+"/", clientv3.WithPrefix())
	if err != nil || len(kv.Kvs) != 1 {
		t.Fatalf("the replaced lock's key: %v %v", kv, err)
	}
	if _, err := admin.Put(ctx, string(kv.Kvs[0].Key), "an operator's value"); err != nil { // no lease: not ours
		t.Fatal(err)
	}
	for i, err := range d.RefreshBatch(ctx, batch) {
		switch batch[i] {
		case deleted:
			if !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, driver.ErrExpired) {
				t.Errorf("lock %s, whose key was deleted: %v, want ErrNotHeld and ErrExpired", batch[i].Key, err)
			}
		case replaced:
			if !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, driver.ErrTakenOver) {
				t.Errorf("lock %s, whose key was replaced: %v, want ErrNotHeld and ErrTakenOver", batch[i].Key, err)
			}
		default:
			if err != nil {
				t.Errorf("lock %s: %v", batch[i].Key, err)
			}
		}
	}
}

// holdMany takes n locks, keys k0… with owners o0…, on d. Their TTL, a
// minute, outlasts taking thousands on a loaded machine: a lock's key is
// deleted once its TTL passes unrefreshed.
func holdMany(ctx context.Context, t *testing.T, d *etcddriver.Driver, n int) []*driver.Request {
	t.Helper()
	reqs := make([]*driver.Request, n)
	for i := range reqs {
		reqs[i] = &driver.Request{Key: fmt.Sprint("k", i), Owner: fmt.Sprint("o", i), TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return reqs
}
