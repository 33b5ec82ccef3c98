package etcddriver_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
)

// keepaliveHole drops the lease keepalives of one client while it is on, as a
// network path that loses them would; everything else still reaches the (real)
// server.
type keepaliveHole struct {
	clientv3.Lease
	mu sync.Mutex
	on bool
}

func (h *keepaliveHole) set(on bool) {
	h.mu.Lock()
	h.on = on
	h.mu.Unlock()
}

func (h *keepaliveHole) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	h.mu.Lock()
	on := h.on
	h.mu.Unlock()
	if on {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Lease.KeepAliveOnce(ctx, id)
}

// holedDriver is a driver whose client's keepalives can be dropped.
func holedDriver(t testing.TB, url string) (*etcddriver.Driver, *keepaliveHole) {
	t.Helper()
	c := newClient(t, url)
	hole := &keepaliveHole{Lease: c.Lease}
	c.Lease = hole
	d, err := etcddriver.New(c, etcddriver.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, hole
}

const slack = time.Second

// When keepalives stop getting through while reads still do (so refreshes keep
// succeeding), every lock on the lease is lost before etcd can expire the lease
// and let another client in; the next acquisition gets a new lease.
func TestLostClosesWhenKeepalivesStopBeforeOthersCanAcquire(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, hole := holedDriver(t, url)
	ttl := d.Capabilities().MinTTL
	a := lock.New(d, lock.WithTTL(ttl))
	defer a.Close()
	b, _ := newLocker(t, url, lock.WithTTL(ttl))

	l1, err := a.Acquire(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	before := d.Leases()
	hole.set(true)
	type result struct {
		l     *lock.Lock
		err   error
		stale bool
	}
	done := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, "k1")
		done <- result{l, err, !isClosed(l1.Lost())}
	}()
	waitClosed(t, l1.Lost(), ttl+slack, "Lost of k1 after keepalives stopped")
	waitClosed(t, l2.Lost(), slack, "Lost of k2, on the same lease")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stale {
		t.Error("another client acquired while the first holder's Lost was still open")
	}
	if r.l.Token() <= l1.Token() {
		t.Errorf("token %d after %d", r.l.Token(), l1.Token())
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	hole.set(false)
	l3, err := a.Acquire(ctx, "k3")
	if err != nil {
		t.Fatalf("Acquire after the lease was lost: %v", err)
	}
	if after := d.Leases(); len(after) != 1 || after[0] == before[0] {
		t.Errorf("leases before the loss %v, after %v: want a new one", before, after)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An operator revoking the lease (etcdctl lease revoke) ends every lock on it
// within a keepalive interval, and the driver takes a new lease for new locks.
func TestRevokedLeaseLosesEveryLockOnIt(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ttl := 3 * time.Second
	a, d := newLocker(t, url, lock.WithTTL(ttl))
	ls := make([]*lock.Lock, 3)
	for i := range ls {
		var err error
		if ls[i], err = a.Acquire(ctx, string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	leases := d.Leases()
	if len(leases) != 1 {
		t.Fatalf("%d leases for locks of one TTL, want 1", len(leases))
	}
	if _, err := newClient(t, url).Revoke(ctx, leases[0]); err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		waitClosed(t, l.Lost(), ttl/3+slack, "Lost after the lease was revoked")
		if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Errorf("Release after revoke = %v, want ErrLost", err)
		}
	}
	l, err := a.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatalf("TryAcquire after the revoke: %v", err)
	}
	if now := d.Leases(); len(now) != 1 || now[0] == leases[0] {
		t.Errorf("leases %v after revoking %v: want one new lease", now, leases[0])
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An operator deleting one lock's key ends that lock at its next refresh and
// leaves the others on the same lease alone.
func TestDeletedKeyLosesOnlyThatLock(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ttl := 3 * time.Second
	a, d := newLocker(t, url, lock.WithTTL(ttl))
	gone, kept := mustAcquire(t, a, "gone"), mustAcquire(t, a, "kept")
	admin := newClient(t, url)
	if _, err := admin.Delete(ctx, d.LockPrefix("gone")+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, gone.Lost(), ttl/3+slack, "Lost after the key was deleted")
	if err := kept.Refresh(ctx); err != nil {
		t.Fatalf("the other lock on the lease: Refresh = %v", err)
	}
	if isClosed(kept.Lost()) {
		t.Fatal("the other lock on the lease was lost too")
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func mustAcquire(t testing.TB, lk *lock.Locker, key string) *lock.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

// queued waits until n contenders' keys are in key's range.
func queued(t testing.TB, c *clientv3.Client, d *etcddriver.Driver, key string, n int64) {
	t.Helper()
	queuedAt(t, c, d.LockPrefix(key), n)
}

// queuedAt waits until n contenders' keys are in the range of the lock named
// name (Driver.LockPrefix).
func queuedAt(t testing.TB, c *clientv3.Client, name string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Get(context.Background(), name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys queued for %q, want %d", resp.Count, name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A waiter whose lease ends while it waits is never told it holds the lock (etcd
// issue #11456, the Jepsen etcd 3.4.3 finding): neither when its own keepalives
// stop (it learns at its lease's deadline), nor when etcd drops its lease without
// it learning so (it finds its key gone in the read that would make it holder).
func TestWaiterWhoseLeaseEndsIsNeverToldItHolds(t *testing.T) {
	url := testserverEtcd(t)
	admin := newClient(t, url)
	for _, tc := range []struct {
		name   string
		revoke bool // etcd drops the lease (as its expiry would) while the waiter's keepalives are lost
	}{
		{"KeepalivesLost", false},
		{"LeaseDroppedUnnoticed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a, _ := newLocker(t, url, lock.WithTTL(5*time.Second))
			held := mustAcquire(t, a, "k")
			w, hole := holedDriver(t, url)
			ttl := w.Capabilities().MinTTL
			req := &driver.Request{Key: "k", Owner: "waiter", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
			type result struct {
				g   driver.Grant
				err error
			}
			done := make(chan result, 1)
			go func() {
				g, err := w.Acquire(ctx, req)
				done <- result{g, err}
			}()
			queued(t, admin, w, "k", 2)
			lease := w.Leases()[0]
			hole.set(true)
			if tc.revoke {
				if _, err := admin.Revoke(ctx, lease); err != nil {
					t.Fatal(err)
				}
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(ttl + slack):
				t.Fatal("the waiter did not return after its lease ended")
			}
			if r.err == nil {
				t.Fatalf("the waiter was told it holds the lock (token %d) on lease %x, which had ended", r.g.Token, lease)
			}
			t.Logf("waiter: %v", r.err)
			if !tc.revoke {
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Nothing of the waiter stays queued: the lock is free.
			b, _ := newLocker(t, url)
			l, err := b.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("TryAcquire after the waiter failed: %v", err)
			}
			_ = l.Release(ctx)
		})
	}
}

// Closing a driver ends its waiting Acquire calls with ErrClosed and its held
// locks' Lost, and revokes its lease at once, so others need not wait for expiry.
func TestCloseEndsWaitersAndFreesLocksAtOnce(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other, _ := newLocker(t, url, lock.WithTTL(5*time.Second))
	busy := mustAcquire(t, other, "busy")
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	ttl := 5 * time.Second
	lost := make(chan error, 1)
	held := &driver.Request{Key: "held", Owner: "h", TTL: ttl, Lost: driver.LostFunc(func(err error) { lost <- err })}
	if _, err := d.TryAcquire(ctx, held); err != nil {
		t.Fatal(err)
	}
	waiter := &driver.Request{Key: "busy", Owner: "w", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	waited := make(chan error, 1)
	go func() {
		_, err := d.Acquire(ctx, waiter)
		waited <- err
	}()
	queued(t, newClient(t, url), d, "busy", 2)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, driver.ErrClosed) {
		t.Errorf("waiting Acquire after Close = %v, want ErrClosed", err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Lost cause %v, want one matching ErrNotHeld", err)
		}
	default:
		t.Error("Close did not report the held lock lost")
	}
	// The lease was revoked: the lock is free now, not after its TTL.
	l, err := other.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatalf("TryAcquire right after the holder's Close: %v", err)
	}
	_ = l.Release(ctx)
	_ = busy.Release(ctx)
	if _, err := d.TryAcquire(ctx, held); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
	}
}
