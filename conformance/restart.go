package conformance

import (
	"time"

	"github.com/distlock/lock"
)

func (e *env) needRestartLosingLocks() {
	if e.h.RestartLosingLocks == nil {
		e.Skip("Harness.RestartLosingLocks is nil: this harness cannot restart its backend without the locks it held")
	}
}

// restartLosingLocks restarts the backend and returns when it answers again.
func (e *env) restartLosingLocks() time.Time {
	e.Helper()
	begin := time.Now()
	if err := e.h.RestartLosingLocks(e.ctx); err != nil {
		e.Fatalf("Harness.RestartLosingLocks: %v", err)
	}
	// A restarted server's process waiter outlives the property.
	e.acceptGoroutines()
	back := time.Now()
	e.Logf("the backend restarted in %v", back.Sub(begin))
	return back
}

// A backend that comes back without the locks it held (a crash of a Redis
// without persistence, any PostgreSQL restart) hands them to the next client at
// once. The holder must learn it when its driver's connection sees the crash,
// not at its next refresh, a third of a long TTL later. The time from the
// backend answering again to Lost closing is logged as a figure.
func testLostClosesPromptlyOnRestartLosingLocks(e *env) {
	e.needRestartLosingLocks()
	ttl := restartTTL
	if _, max := e.caps.TTLRange(); ttl > max {
		ttl = max
	}
	a := e.client(lock.WithTTL(ttl))
	l := e.acquire(a, e.key)
	lost := e.watchLost(l)
	back := e.restartLosingLocks()
	if !lost.within(e.ctx, RestartLossBound) {
		e.Errorf("Lost did not close within %v of the backend answering again without the lock (TTL %v: the next refresh is due %v after the grant)", RestartLossBound, ttl, ttl/3)
		// Measure it all the same, for the figures.
		if !lost.within(e.ctx, ttl/3+lossSlack) {
			e.Fatalf("Lost did not close within %v of the restart", RestartLossBound+ttl/3+lossSlack)
		}
	}
	e.figure("restart-loss-detection", lost.at.Sub(back))
	e.checkCause(l, e.h.RestartCause, "a lock the backend lost in a restart")
}

// After a restart, the driver (which may have remembered the server it spoke to)
// must not report a healthy lock taken on the new server as lost.
func testLockTakenAfterRestartIsNotReportedLost(e *env) {
	e.needRestartLosingLocks()
	a, b := e.client(), e.client()
	before := e.acquire(a, e.key+"/before")
	e.restartLosingLocks()
	// The Locker that saw the restart, and a client that did not exist before.
	var held []*lock.Lock
	for _, lk := range []*lock.Locker{a, b} {
		ctx, cancel := e.boundedCtx(10 * time.Second)
		l, err := lk.Acquire(ctx, e.key+"/after/"+string(rune('a'+len(held))))
		cancel()
		if err != nil {
			e.Fatalf("Acquire after the restart: %v", err)
		}
		held = append(held, l)
	}
	// Time must pass: the locks must outlive several refreshes (TTL/3 each).
	hold := e.ttl*3/2 + 100*time.Millisecond
	t := time.NewTimer(hold)
	defer t.Stop()
	for i, l := range held {
		select {
		case <-l.Lost():
			e.Fatalf("Lost of a lock taken after the restart (client %d of 2) closed while the backend was healthy", i+1)
		case <-t.C:
			t.Reset(0)
		}
	}
	for _, l := range held {
		e.release(l)
	}
	e.releaseAfterFault(before) // lost in the restart
}

// Tokens keep increasing across a restart that lost the locks (Redis without
// persistence seeds a missing counter from the server's clock; PostgreSQL keeps
// its sequence).
func testTokensIncreaseAcrossRestartLosingLocks(e *env) {
	e.needFencing()
	e.needRestartLosingLocks()
	if e.h.RestartLosesTokens {
		e.Skip("Harness.RestartLosesTokens: the restart wipes the counter the tokens come from, and tokens are promised to increase only where the backend keeps its data (TokensIncreaseAcrossBackendRestart checks that)")
	}
	a := e.client()
	l := e.acquire(a, e.key)
	first := e.token(l)
	e.restartLosingLocks()
	e.releaseAfterFault(l) // lost in the restart, or released now
	b := e.client()
	ctx, cancel := e.boundedCtx(10 * time.Second)
	defer cancel()
	l2, err := b.Acquire(ctx, e.key)
	if err != nil {
		e.Fatalf("Acquire after the restart: %v", err)
	}
	if tok := e.token(l2); tok <= first {
		e.Errorf("token %d after a restart that lost the locks, not greater than %d before it", tok, first)
	}
	e.release(l2)
}
