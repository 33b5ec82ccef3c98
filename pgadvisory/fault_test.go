package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// lossSlack is how long after its bound a loss may be reported on a loaded
// machine.
const lossSlack = time.Second

// promptLoss bounds how long after a server ends its sessions (a crash, a
// restart) their locks are reported lost. The driver learns it from the
// connections themselves, within milliseconds; the bound is generous for a
// loaded machine and far below the first refresh (TTL/3, 10s with the default
// TTL), which is how the loss used to be learned.
const promptLoss = 2 * time.Second

// A server killed (a crash) or shut down (a restart) drops every session, and
// every lock held through it is reported lost at once, not at the next refresh,
// whether it shared a connection or had its own; the fencing tokens after the
// restart are greater than any before it, although the test server runs with
// synchronous_commit=off.
func TestServerCrashLosesEveryLockAtOnceAndTokensKeepIncreasing(t *testing.T) {
	for _, fault := range []string{"kill", "fast shutdown"} {
		t.Run(fault, func(t *testing.T) {
			srv := testserver.StartPostgres(t)
			crash := srv.Kill
			if fault == "fast shutdown" {
				crash = srv.Stop
			}
			crashLosesEveryLockAtOnce(t, srv, crash)
		})
	}
}

func crashLosesEveryLockAtOnce(t *testing.T, srv *testserver.Server, crash func() error) {
	ctx := context.Background()
	d, locker := openDriver(t, srv.URL()) // the default TTL: no refresh within the test's bound
	other := lock.New(mustOpen(t, srv.URL()))
	defer other.Close()

	var held []*lock.Lock
	var maxToken uint64
	take := func(l *lock.Lock, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		maxToken = max(maxToken, l.Token())
	}
	// Tokens drawn just before the crash must not be reissued after it.
	for i := 0; i < 200; i++ {
		l, err := locker.TryAcquire(ctx, t.Name()+"/churn")
		if err != nil {
			t.Fatal(err)
		}
		maxToken = max(maxToken, l.Token())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ { // sharing a connection
		take(locker.TryAcquire(ctx, fmt.Sprintf("%s/%d", t.Name(), i)))
	}
	take(locker.Acquire(ctx, t.Name()+"/shared", lock.WithShared(true)))
	// One taken by waiting, on a connection of its own.
	blocker, err := other.Acquire(ctx, t.Name()+"/waited")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := locker.Acquire(ctx, t.Name()+"/waited")
		got <- result{l, err}
	}()
	waitQueued(t, srv.URL(), pgadvisory.LockID(pgadvisory.DefaultPrefix, t.Name()+"/waited"), 1)
	if err := blocker.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	take(r.l, r.err)
	if conns, _ := sessions(t, srv.URL(), d); conns < 2 {
		t.Fatalf("the locks are on %d connection(s); the test needs at least 2", conns)
	}

	began := time.Now()
	if err := crash(); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	var last time.Time
	for _, l := range held {
		select {
		case <-l.Lost():
			last = time.Now()
		case <-time.After(promptLoss - time.Since(began)):
			t.Fatalf("Lost() of %q not closed within %v of the crash", l.Key(), promptLoss)
		}
	}
	t.Logf("all %d locks reported lost %v after the fault began, %v after the server's processes were gone",
		len(held), last.Sub(began).Round(10*time.Microsecond), max(last.Sub(crashed), 0).Round(10*time.Microsecond))
	for _, l := range held {
		if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Errorf("Release of %q after the crash = %v, want ErrLost", l.Key(), err)
		}
	}

	if err := srv.Restart(true); err != nil {
		t.Fatal(err)
	}
	// The same Locker, now on new sessions, and a new one both get greater
	// tokens; a lock taken after the restart is not reported lost.
	for i, lk := range []*lock.Locker{locker, lock.New(mustOpen(t, srv.URL()))} {
		if i == 1 {
			defer lk.Close()
		}
		for _, key := range []string{t.Name() + "/churn", t.Name() + "/0"} {
			l, err := lk.Acquire(ctx, key)
			if err != nil {
				t.Fatalf("Acquire after the restart: %v", err)
			}
			if l.Token() <= maxToken {
				t.Errorf("token %d after the restart, not greater than %d before it", l.Token(), maxToken)
			}
			maxToken = l.Token()
			if err := l.Refresh(ctx); err != nil {
				t.Errorf("Refresh of a lock taken after the restart: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A server that stops answering (a frozen machine, a network cut that drops
// packets silently) cannot confirm any lock: every one is reported lost by its
// deadline, and a refresh does not hang past its context.
func TestSilentServerLosesLocksByTheDeadline(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartPostgres(t)
	const ttl = time.Second
	d, locker := openDriver(t, srv.URL(), lock.WithTTL(ttl))
	var held []*lock.Lock
	for i := 0; i < 20; i++ {
		l, err := locker.Acquire(ctx, fmt.Sprintf("%s/%d", t.Name(), i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	paused := time.Now()

	// The driver itself: a refresh gives up within its context plus the grace
	// the driver allows a statement, rather than waiting for TCP to give up.
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := held[0].Refresh(rctx)
	cancel()
	if took := time.Since(paused); err == nil || took > 200*time.Millisecond+2*time.Second {
		t.Errorf("Refresh of a silent session = %v after %v, want an error within its context and the grace", err, took)
	}
	for _, l := range held {
		select {
		case <-l.Lost():
		case <-time.After(ttl + lossSlack - time.Since(paused)):
			t.Fatalf("Lost() of %q not closed within %v of the server going silent", l.Key(), ttl+lossSlack)
		}
	}
	t.Logf("all %d locks reported lost %v after the server went silent", len(held), time.Since(paused).Round(time.Millisecond))

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	// The silent sessions were given up; new ones work.
	l, err := locker.Acquire(ctx, t.Name()+"/after")
	if err != nil {
		t.Fatalf("Acquire after the server answers again: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = d
}

// A wait cancelled just as the lock is granted must not leave the lock held by
// nobody: Acquire either returns the lock or leaves the key free.
func TestCancelledWaitLeavesNoLockWhenTheGrantRaces(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	_, holder := openDriver(t, dsn)
	_, waiter := openDriver(t, dsn)
	_, checker := openDriver(t, dsn)
	admin := connect(t, dsn)
	key := t.Name()
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, key)
	var won, cancelled int
	for i := 0; i < 60; i++ {
		l, err := holder.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		var got *lock.Lock
		go func() {
			var err error
			got, err = waiter.Acquire(wctx, key)
			res <- err
		}()
		eventually(t, 10*time.Second, "the waiter queued on the server", func() bool { return waiters(t, admin, id) == 1 })
		// Release and cancel at once, with a varying head start for the
		// release. The delay orders nothing (either outcome is accepted): it
		// moves the cancel across the window in which the grant arrives.
		released := make(chan error, 1)
		go func() { released <- l.Release(ctx) }()
		spin(time.Duration(i%6) * 100 * time.Microsecond)
		cancel()
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		err = <-res
		if err == nil {
			won++
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: Acquire = %v, want the lock or context.Canceled", i, err)
		}
		cancelled++
		// Acquire waits settleWait for the server to answer the cancel; a
		// server slower than that (a loaded machine) has the driver end the
		// wait in the background, as the package doc says. Either way the
		// lock must not stay held.
		held := func() int {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
			AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := held(); n != 0 {
			t.Logf("round %d: the cancelled Acquire returned before the server answered its cancel (%d entries in pg_locks); waiting for the background end", i, n)
			eventually(t, 5*time.Second, fmt.Sprintf("round %d: the lock granted to the cancelled Acquire given back", i), func() bool { return held() == 0 })
		}
		c, err := checker.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("round %d: TryAcquire after a cancelled wait = %v, want the free lock", i, err)
		}
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the waiter got the lock %d times and was cancelled %d times", won, cancelled)
}

// spin busy-waits for d, a delay too short for the scheduler's timers to be
// precise about.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
		runtime.Gosched()
	}
}
