package etcddriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// openLocker opens a Locker from an etcd URL, closed when t ends.
func openLocker(t *testing.T, rawURL string, opts ...lock.Option) *lock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := lock.Open(ctx, rawURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	return lk
}

// When etcd crashes and comes back without its data (a replaced machine), the
// lease and key are gone: Lost closes as soon as the driver reconnects, through
// the lease keepalive it sends on reconnecting, not at the next refresh (a third
// of the TTL later). A lock taken afterwards is not reported lost.
func TestLostSoonAfterTheServerRestartsEmpty(t *testing.T) {
	s := testserver.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The default TTL: refreshes and scheduled keepalives every 10s, so a loss
	// noticed within a few seconds of the restart was noticed on reconnecting.
	const ttl = 30 * time.Second
	lk := openLocker(t, s.URL()+testPrefix(t), lock.WithTTL(ttl))
	l := mustAcquire(t, lk, "k")

	killed := time.Now()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	// Reconnecting backs off for at most a second (see the package doc); the
	// keepalive then takes one round trip.
	const bound = 3 * time.Second
	select {
	case <-l.Lost():
	case <-time.After(bound):
		t.Fatalf("Lost still open %v after the server came back empty (down for %v)", bound, up.Sub(killed).Round(time.Millisecond))
	}
	t.Logf("Lost %v after the kill, %v after the empty server answered (down for %v)",
		time.Since(killed).Round(time.Millisecond), time.Since(up).Round(time.Millisecond), up.Sub(killed).Round(time.Millisecond))
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) && !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Release of the lost lock = %v, want ErrLost", err)
	}

	l2 := mustAcquire(t, lk, "k")
	if err := l2.Refresh(ctx); err != nil {
		t.Fatalf("Refresh of a lock taken after the restart: %v", err)
	}
	if isClosed(l2.Lost()) {
		t.Fatal("a lock taken after the restart is reported lost")
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A restart that keeps the data keeps the lease (etcd renews leases on
// restart): the keepalive sent on reconnecting confirms it and nothing is lost.
func TestRestartWithItsDataLosesNothing(t *testing.T) {
	s := testserver.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 10 * time.Second
	lk := openLocker(t, s.URL()+testPrefix(t), lock.WithTTL(ttl))
	l := mustAcquire(t, lk, "k")
	token := l.Token()
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh after a restart with data: %v", err)
	}
	other := openLocker(t, s.URL()+testPrefix(t), lock.WithTTL(ttl))
	if _, err := other.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("another client's TryAcquire after the restart = %v, want ErrLocked", err)
	}
	if isClosed(l.Lost()) {
		t.Fatal("Lost closed across a restart that kept the data")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustAcquire(t, other, "k")
	if l2.Token() <= token {
		t.Errorf("token %d after %d across the restart", l2.Token(), token)
	}
	_ = l2.Release(ctx)
}

// When the server freezes (SIGSTOP) for longer than the TTL, the holder's Lost
// closes within the TTL: at a TTL less the drift allowance after the last
// keepalive etcd confirmed, which was sent before the freeze. A waiter of
// another client, queued before the freeze, gets the lock once the server
// resumes and expires the lease, and by then the holder's Lost has closed.
func TestLostBeforeAnotherHoldsAfterAFreezePastTheTTL(t *testing.T) {
	s := testserver.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 3 * time.Second
	lk := openLocker(t, s.URL()+testPrefix(t), lock.WithTTL(ttl))
	// The waiter's own lease outlives the freeze, so it keeps its place.
	other := openLocker(t, s.URL()+testPrefix(t), lock.WithTTL(10*ttl))
	l := mustAcquire(t, lk, "k")
	type result struct {
		l     *lock.Lock
		err   error
		stale bool // the first holder's Lost was still open when the waiter got the lock
	}
	got := make(chan result, 1)
	go func() {
		l2, err := other.Acquire(ctx, "k")
		got <- result{l2, err, !isClosed(l.Lost())}
	}()
	queuedAt(t, newClient(t, s.URL()), testPrefix(t)+"/k", 2)

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	// The freeze lasts past the TTL whatever Lost does: etcd expires the lease
	// once it runs again.
	resume := time.AfterFunc(ttl+500*time.Millisecond, func() { _ = s.Resume() })
	defer func() {
		if resume.Stop() {
			_ = s.Resume()
		}
	}()
	select {
	case <-l.Lost():
		t.Logf("Lost %v after the freeze (TTL %v)", time.Since(frozen).Round(time.Millisecond), ttl)
	case <-time.After(ttl + slack):
		t.Fatalf("Lost still open %v after the server froze, with a TTL of %v", ttl+slack, ttl)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the lock within 30s of the freeze")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("the waiter got the lock %v after the freeze", time.Since(frozen).Round(time.Millisecond))
	if r.stale {
		t.Error("the waiter got the lock while the first holder's Lost was still open")
	}
	if r.l.Token() <= l.Token() {
		t.Errorf("token %d after %d", r.l.Token(), l.Token())
	}
	_ = r.l.Release(ctx)
}

// A held lock's key deleted by someone else (an operator's etcdctl del) is
// reported at the next refresh as expired, as a key gone with its TTL; the same
// key put again by someone else (another lock's key in its place) as taken
// over. Either way the holder's Release leaves what is there alone.
func TestRefreshFindingItsKeyDeletedOrReplacedSaysWhy(t *testing.T) {
	url := testserverEtcd(t)
	for _, c := range []struct {
		how   string
		cause error
	}{
		{"deleted", lock.ErrExpired},
		{"replaced", lock.ErrTakenOver},
	} {
		t.Run(c.how, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Refreshed by hand, so that none runs between the delete and the put.
			lk, _ := newLocker(t, url, lock.WithAutoRefresh(false))
			admin := newClient(t, url)
			l := mustAcquire(t, lk, "k")
			prefix := testPrefix(t) + "/k/"
			got, err := admin.Get(ctx, prefix, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Kvs) != 1 {
				t.Fatalf("%d keys under %s, want the held lock's one", len(got.Kvs), prefix)
			}
			key := string(got.Kvs[0].Key)
			if _, err := admin.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			if c.how == "replaced" {
				if _, err := admin.Put(ctx, key, "operator"); err != nil {
					t.Fatal(err)
				}
				// The operator's key has no lease: remove it, or it holds the
				// lock for the next run on the shared server.
				t.Cleanup(func() { _, _ = admin.Delete(context.Background(), key) })
			}
			if err := l.Refresh(ctx); !errors.Is(err, lock.ErrLost) || !errors.Is(err, c.cause) {
				t.Errorf("Refresh = %v, want ErrLost and %v", err, c.cause)
			}
			if err := l.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, c.cause) {
				t.Errorf("Err = %v, want ErrLost and %v", err, c.cause)
			}
			if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
				t.Errorf("Release = %v, want ErrLost", err)
			}
			if c.how == "replaced" {
				if v, err := admin.Get(ctx, key); err != nil || len(v.Kvs) != 1 || string(v.Kvs[0].Value) != "operator" {
					t.Errorf("the key put in its place after the holder let go: %v, %v; want it untouched", v, err)
				}
			}
		})
	}
}
