package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// wait bounds every wait for a condition: generous, so that the tests hold on a
// loaded two-core machine; conditions are awaited, never slept for.
const wait = 30 * time.Second

// partitionCase is one run of the minority-holder scenario.
type partitionCase struct {
	backend   string // for figures: etcd, zookeeper
	role      string // what the holder's server is: leader, follower
	holderURL string // names only the holder's server
	otherURL  string // names only the servers of the majority
	ttl       time.Duration
	// cut partitions the holder's server from the others.
	cut func() *testserver.Partition
	// converged reports nil once every server is back in one cluster that agrees.
	converged func(ctx context.Context) error
	// freed, started while the holder holds key, finds the holder's entry on the
	// majority side, closes ready, and returns when it saw that entry deleted (the
	// lease or session expired): a figure, not an assertion.
	freed func(ctx context.Context, key string, ready chan<- struct{}) (time.Time, error)
}

// grant is the outcome of the majority client's Acquire.
type grant struct {
	lock *lock.Lock
	err  error
	at   time.Time
	// lostFirst is whether the partitioned holder's Lost had closed when Acquire
	// returned: looked at right then, so no timing is involved.
	lostFirst bool
}

// runPartition holds a lock through the holder's server, partitions that server
// from the rest of the cluster, and checks the order of events:
//
//   - the holder's Lost closes;
//   - a client of the majority acquires the same key, and by the time its
//     Acquire returns the holder's Lost has closed;
//   - its fencing token is larger than the holder's;
//   - after healing, the cluster converges, the old holder's Release reports the
//     lock lost, and the new holder still holds it (and Release freed nothing of
//     it: the old holder's client cannot take it until the new holder lets go).
func runPartition(t *testing.T, pc partitionCase) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const key = "partitioned/holder"

	holder := open(t, ctx, pc.holderURL, pc.ttl)
	other := open(t, ctx, pc.otherURL, pc.ttl)

	l1, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("holder: Acquire: %v", err)
	}
	tok1 := l1.Token()
	lost := make(chan time.Time, 1)
	go func() {
		<-l1.Lost() // closes at the latest when the holder's Locker closes
		lost <- time.Now()
	}()

	type freedAt struct {
		at  time.Time
		err error
	}
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	ready, freed := make(chan struct{}), make(chan freedAt, 1)
	go func() {
		at, err := pc.freed(fctx, key, ready)
		freed <- freedAt{at, err}
	}()
	select {
	case <-ready:
	case f := <-freed:
		t.Fatalf("watching the holder's entry: %v", f.err)
	}

	p := pc.cut()
	cutAt := time.Now()

	granted := make(chan grant, 1)
	go func() {
		l2, err := other.Acquire(ctx, key)
		g := grant{lock: l2, err: err, at: time.Now()}
		select {
		case <-l1.Lost():
			g.lostFirst = true
		default:
		}
		granted <- g
	}()

	var lostAt time.Time
	select {
	case lostAt = <-lost:
	case <-time.After(wait):
		t.Fatalf("holder's Lost did not close within %v of the partition", wait)
	}
	var g grant
	select {
	case g = <-granted:
	case <-time.After(wait):
		t.Fatalf("the majority's client got no lock within %v of the holder's Lost", wait)
	}
	if g.err != nil {
		t.Fatalf("majority's client: Acquire: %v", g.err)
	}
	l2 := g.lock
	figure(t, "partition-to-lost/holder-on-"+pc.role, pc.backend, lostAt.Sub(cutAt))
	figure(t, "partition-to-grant/holder-on-"+pc.role, pc.backend, g.at.Sub(cutAt))
	figure(t, "lost-to-grant/holder-on-"+pc.role, pc.backend, g.at.Sub(lostAt))
	// The entry was deleted before the grant; the watcher hears of it soon.
	select {
	case f := <-freed:
		if f.err != nil {
			t.Errorf("watching the holder's entry: %v", f.err)
		} else {
			figure(t, "partition-to-freed/holder-on-"+pc.role, pc.backend, f.at.Sub(cutAt))
		}
	case <-time.After(wait):
		t.Errorf("the watcher did not see the holder's entry deleted within %v of the grant", wait)
	}
	if !g.lostFirst {
		t.Errorf("the majority's client acquired the key while the partitioned holder's Lost was still open (Lost seen %v after the partition, grant %v)",
			lostAt.Sub(cutAt).Round(time.Millisecond), g.at.Sub(cutAt).Round(time.Millisecond))
	}
	if tok2 := l2.Token(); tok2 <= tok1 {
		t.Errorf("new holder's token %d is not larger than the partitioned holder's %d", tok2, tok1)
	} else {
		t.Logf("tokens: partitioned holder %d, new holder %d", tok1, tok2)
	}

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	healAt := time.Now()
	waitFor(t, ctx, "the cluster to converge after healing", pc.converged)
	figure(t, "heal-to-converged/holder-on-"+pc.role, pc.backend, time.Since(healAt))

	// The old holder's Release must say the lock was lost, and leave the new
	// holder's lock alone.
	rctx, rcancel := context.WithTimeout(ctx, wait)
	err = l1.Release(rctx)
	rcancel()
	if !errors.Is(err, lock.ErrLost) {
		t.Errorf("old holder's Release after healing = %v; want an error matching ErrLost", err)
	}
	select {
	case <-l2.Lost():
		t.Fatalf("new holder's Lost closed by the time the old holder's Release returned (Refresh: %v)", l2.Refresh(ctx))
	default:
	}
	if err := refresh(ctx, l2); err != nil {
		t.Fatalf("new holder's Refresh after the old holder's Release: %v", err)
	}
	// The old holder's client, through the healed server, finds the key taken.
	if l, err := tryAcquire(ctx, holder, key); !errors.Is(err, lock.ErrLocked) {
		if l != nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("old holder's client: TryAcquire while the new holder holds = %v; want ErrLocked", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("new holder's Release: %v", err)
	}
	// And once the new holder lets go, the old holder's client gets the key back,
	// with a larger token still.
	l3, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("old holder's client: Acquire after the new holder's Release: %v", err)
	}
	if tok3 := l3.Token(); tok3 <= l2.Token() {
		t.Errorf("token after healing %d is not larger than the new holder's %d", tok3, l2.Token())
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatalf("Release after healing: %v", err)
	}
}

// open opens a Locker on url with ttl, closed when t ends.
func open(t *testing.T, ctx context.Context, url string, ttl time.Duration) *lock.Locker {
	t.Helper()
	lk, err := lock.Open(ctx, url, lock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("Open %s: %v", url, err)
	}
	t.Cleanup(func() {
		if err := lk.Close(); err != nil {
			t.Errorf("Close %s: %v", url, err)
		}
	})
	return lk
}

// refresh refreshes l, retrying while the backend is unavailable (a member
// still catching up after the heal), until wait passes.
func refresh(ctx context.Context, l *lock.Lock) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		err := l.Refresh(ctx)
		if err == nil || !errors.Is(err, lock.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tryAcquire tries to take key once the backend answers: it retries while the
// backend is unavailable (the client still reconnecting after the heal), until
// wait passes.
func tryAcquire(ctx context.Context, lk *lock.Locker, key string) (*lock.Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		l, err := lk.TryAcquire(ctx, key)
		if err == nil || !errors.Is(err, lock.ErrUnavailable) || ctx.Err() != nil {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitFor polls cond until it returns nil, failing t with its last error after
// wait.
func waitFor(t *testing.T, ctx context.Context, what string, cond func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cond(cctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v: %v", what, wait, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond): // poll interval
		}
	}
}

// figure logs a measurement in the form the project's scripts collect.
func figure(t *testing.T, what, backend string, d time.Duration) {
	t.Helper()
	t.Logf("figure %s %s %v", what, backend, d.Round(time.Millisecond))
}

// others returns the indexes of a 3-member cluster other than i.
func others(i int) (int, int) { return (i + 1) % 3, (i + 2) % 3 }
