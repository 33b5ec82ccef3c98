package redlockdriver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// settled reports whether d is subscribed on every server and has checked its
// held locks since the last subscription was confirmed.
func (d *Driver) settled() bool {
	d.held.Lock()
	defer d.held.Unlock()
	return d.sub.nup == len(d.servers) && !d.checking.running && d.checking.through == d.backs.Load()
}

// checkedSince reports whether a subscription was confirmed since d.backs was
// backs, and d has settled since.
func (d *Driver) checkedSince(backs uint64) func() bool {
	return func() bool { return d.backs.Load() > backs && d.settled() }
}

// crashLocker opens a driver on servers with a Locker over it (TTL 30s, so
// that the first refresh is 10s after a grant), both closed with the test.
func crashLocker(t *testing.T, ctx context.Context, servers []*testserver.Server) (*Driver, *lock.Locker) {
	t.Helper()
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, lock.WithTTL(30*time.Second))
	t.Cleanup(func() { _ = lk.Close() })
	return d, lk
}

// restartEmpty kills the servers (SIGKILL, no persistence) and starts them
// again empty, all at once, as a crash of their machines would. It returns
// when every one answers again.
func restartEmpty(servers ...*testserver.Server) error {
	errs := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			err := s.Kill()
			if err == nil {
				err = s.Restart(false)
			}
			errs <- err
		}()
	}
	var all []error
	for range servers {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// lostWithin waits up to limit for l's Lost and returns when it closed.
func lostWithin(l *lock.Lock, limit time.Duration) (time.Time, bool) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-l.Lost():
		return time.Now(), true
	case <-t.C:
		return time.Time{}, false
	}
}

// isOpen reports whether l's Lost is still open.
func isOpen(l *lock.Lock) bool {
	select {
	case <-l.Lost():
		return false
	default:
		return true
	}
}

// A holder learns that a majority of the servers crashed and came back
// without its lock as soon as their subscriptions are back, not at its next
// refresh (TTL/3 = 10s): a driver that holds a lock keeps a subscription on
// every server (even if it never waited), and checks its locks on every server
// when one comes back. Two of three servers are killed and started again
// empty; the time from their return to Lost() is logged. A lock taken after
// the restarts is then not reported lost when every subscription comes back
// again (the run_id of the new processes is the one it was granted by).
func TestMajorityRestartedEmptyIsReportedWhenTheServersReturn(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, lk := crashLocker(t, ctx, servers)
	const rounds = 7
	var sinceDown, sinceBack []time.Duration
	for i := range rounds {
		// Acquire, not TryAcquire: right after the last round's restarts the
		// driver may still be reconnecting, a transient failure that Acquire
		// retries and TryAcquire would report.
		l, err := lk.Acquire(ctx, "nightly")
		if err != nil {
			t.Fatalf("round %d: %v", i+1, err)
		}
		waitUntil(ctx, t, "the driver's subscriptions and checks", d.settled)
		// The two servers restarted are the round's pick of three.
		crashed := []*testserver.Server{servers[i%3], servers[(i+1)%3]}
		down := time.Now()
		lost := make(chan time.Time, 1)
		go func() {
			at, ok := lostWithin(l, 20*time.Second)
			if ok {
				lost <- at
			}
			close(lost)
		}()
		if err := restartEmpty(crashed...); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		var at time.Time
		select {
		case at = <-lost:
		case <-time.After(5 * time.Second):
		}
		if at.IsZero() {
			t.Fatalf("round %d: Lost() still open 5s after two of three servers came back empty (the next refresh is 10s after the grant)", i+1)
		}
		sinceDown = append(sinceDown, at.Sub(down))
		sinceBack = append(sinceBack, at.Sub(back))
		err = l.Release(ctx)
		if !errors.Is(err, lock.ErrLost) || !errors.Is(err, ErrForgotten) {
			t.Fatalf("round %d: Release after the loss = %v, want ErrLost and ErrForgotten", i+1, err)
		}
	}
	slices.Sort(sinceDown)
	slices.Sort(sinceBack)
	// The servers' return is when the test's readiness probes saw both
	// answer, which the driver's own reconnection may beat (a negative
	// figure).
	t.Logf("loss detection over %d rounds (2 of 3 servers killed, back empty): from the servers' return to Lost(): median %v, max %v; from the kill: median %v, max %v",
		rounds, sinceBack[rounds/2].Round(time.Millisecond), sinceBack[rounds-1].Round(time.Millisecond),
		sinceDown[rounds/2].Round(time.Millisecond), sinceDown[rounds-1].Round(time.Millisecond))
	for _, x := range sinceBack {
		if x > time.Second {
			t.Errorf("Lost() closed %v after the servers' return, want well under a second", x)
		}
	}

	// A lock taken on the restarted servers is theirs: when every
	// subscription breaks and comes back (no restart), it is still held.
	l, err := lk.TryAcquire(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, "the driver's subscriptions and checks", d.settled)
	backs := d.backs.Load()
	for i, a := range admins(t, servers) {
		if err := a.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatalf("server %d: CLIENT KILL TYPE pubsub: %v", i+1, err)
		}
	}
	waitUntil(ctx, t, "the checks after the subscriptions came back", d.checkedSince(backs+2))
	if !isOpen(l) {
		t.Fatalf("a lock taken after the restarts was reported lost when the subscriptions came back: %v", l.Release(ctx))
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A lock is held while a majority holds it: one server of three coming back
// empty is seen, and changes nothing; the lock still refreshes.
func TestMinorityRestartedEmptyKeepsTheLock(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, lk := crashLocker(t, ctx, servers)
	l, err := lk.TryAcquire(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, "the driver's subscriptions and checks", d.settled)
	backs := d.backs.Load()
	if err := restartEmpty(servers[0]); err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, "the check after the server came back", d.checkedSince(backs))
	if !isOpen(l) {
		t.Fatalf("one server of three restarted empty: the lock was reported lost, but two servers hold it: %v", l.Release(ctx))
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with one server of three restarted empty: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A server that restarted keeps the lock's key if it persisted it, but its
// data may be older than the lock's last extension: it no longer votes for
// the lock (its run_id changed) until a refresh extends the lock on it again.
// So one server restarted with its data and another restarted empty leave the
// lock on one of three, and it is reported lost; with a refresh in between,
// the first votes again and the lock is kept.
func TestServerRestartedWithItsDataVotesAgainOnlyAfterARefresh(t *testing.T) {
	for _, refresh := range []bool{false, true} {
		name := "no refresh in between: lost"
		if refresh {
			name = "refreshed in between: kept"
		}
		t.Run(name, func(t *testing.T) {
			servers := testserver.RedisServers(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d, lk := crashLocker(t, ctx, servers)
			l, err := lk.TryAcquire(ctx, "nightly")
			if err != nil {
				t.Fatal(err)
			}
			waitUntil(ctx, t, "the driver's subscriptions and checks", d.settled)
			backs := d.backs.Load()
			if err := servers[0].Restart(true); err != nil {
				t.Fatal(err)
			}
			if n, err := admins(t, servers[:1])[0].Exists(ctx, DefaultPrefix+":{nightly}").Result(); err != nil || n != 1 {
				t.Fatalf("the lock's key after a restart that keeps the data: EXISTS = %d, %v; want 1", n, err)
			}
			waitUntil(ctx, t, "the check after the server came back", d.checkedSince(backs))
			if !isOpen(l) {
				t.Fatalf("one server of three restarted: the lock was reported lost: %v", l.Release(ctx))
			}
			if refresh {
				if err := l.Refresh(ctx); err != nil {
					t.Fatalf("Refresh: %v", err)
				}
			}
			backs = d.backs.Load()
			if err := restartEmpty(servers[1]); err != nil {
				t.Fatal(err)
			}
			if !refresh {
				if _, ok := lostWithin(l, 5*time.Second); !ok {
					t.Fatal("Lost() still open 5s after a second server came back empty, the first having restarted since the lock's last extension")
				}
				if err := l.Release(ctx); !errors.Is(err, ErrForgotten) {
					t.Fatalf("Release after the loss = %v, want ErrForgotten", err)
				}
				return
			}
			waitUntil(ctx, t, "the check after the server came back", d.checkedSince(backs))
			if !isOpen(l) {
				t.Fatalf("the lock, extended again on the restarted server, was reported lost: %v", l.Release(ctx))
			}
			if err := l.Refresh(ctx); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
		})
	}
}
