package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/lock"
)

// Against a frozen server (every process stopped, connections open, nothing
// answered) every call with a short context returns within that context and a
// little slack; Acquire returns the context's error.
func testEveryCallHonoursContextAgainstFrozenServer(e *env) {
	e.needFreeze()
	// A long TTL, so that the held lock is not lost (and its Refresh and Release
	// answered without the server) while the calls run.
	ttl := restartTTL
	if _, max := e.caps.TTLRange(); ttl > max {
		ttl = max
	}
	a, b := e.client(lock.WithTTL(ttl)), e.client(lock.WithTTL(ttl))
	held := e.acquire(a, e.key)
	contended := e.key + "/contended"
	blocker := e.acquire(a, contended)
	e.freeze()

	calls := []struct {
		name       string
		call       func(ctx context.Context) error
		wantCtxErr bool
	}{
		{"Acquire of a free key", func(ctx context.Context) error { return acquireAndDrop(ctx, b, e.key+"/free") }, true},
		{"Acquire of a held key", func(ctx context.Context) error { return acquireAndDrop(ctx, b, contended) }, true},
		{"TryAcquire", func(ctx context.Context) error { return acquireAndDrop(ctx, b, e.key+"/try", true) }, false},
		{"Refresh", held.Refresh, false},
		{"Release", held.Release, false},
	}
	// All at once, each with its own short context.
	var wg sync.WaitGroup
	e.Cleanup(wg.Wait) // after the thaw, which lets calls that overran finish
	results := make([]<-chan callResult, len(calls))
	began := time.Now()
	bound := faultCallTimeout + callSlack
	for i, c := range calls {
		results[i] = e.boundedCall(&wg, c.name, bound, func() error {
			ctx, cancel := context.WithTimeout(e.ctx, faultCallTimeout)
			defer cancel()
			err := c.call(ctx)
			if err == nil {
				return errSucceeded
			}
			if c.wantCtxErr && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w, want the context's error", err)
			}
			return nil
		})
	}
	for i, c := range calls {
		r := <-results[i]
		if r.err != nil {
			e.Errorf("%s with a %v context against a frozen server: %v (bound %v)", c.name, faultCallTimeout, r.err, bound)
		}
		e.Logf("%s returned after %v", c.name, r.took.Round(time.Millisecond))
	}
	e.Logf("all calls returned after %v", time.Since(began).Round(time.Millisecond))
	e.thaw()
	_ = held.Release(e.ctx) // released now, or by the call above
	_ = blocker.Release(e.ctx)
}

var errSucceeded = errors.New("succeeded against a frozen server")

// attemptSlack is what TryAcquireWithoutDeadlineIsBoundedAgainstFrozenServer
// allows beyond Harness.AttemptBound: the portable layer's wait for its
// cleanup (250ms) and a loaded machine's scheduling.
const attemptSlack = time.Second

// Against a frozen server, one TryAcquire whose context never ends returns
// within the bound the driver documents for one attempt (Harness.AttemptBound,
// plus attemptSlack), with an error matching ErrUnavailable: a caller without
// a deadline learns that the backend does not answer, in a time the
// documentation states.
func testTryAcquireWithoutDeadlineIsBounded(e *env) {
	e.needFreeze()
	if e.h.AttemptBound <= 0 {
		e.Skip("Harness.AttemptBound is zero: the harness states no bound for one attempt against a server that does not answer")
	}
	a := e.client()
	e.release(e.acquire(a, e.key+"/warm")) // connections are open when the server freezes
	var wg sync.WaitGroup
	e.Cleanup(wg.Wait) // after the thaw, which lets a call that overran finish
	e.freeze()
	bound := e.h.AttemptBound + attemptSlack
	r := <-e.boundedCall(&wg, "TryAcquire", bound, func() error {
		l, err := a.TryAcquire(context.Background(), e.key)
		if err == nil {
			_ = l.Release(context.Background())
			return errSucceeded
		}
		if !errors.Is(err, lock.ErrUnavailable) {
			return fmt.Errorf("%w, want an error matching ErrUnavailable", err)
		}
		e.Logf("TryAcquire: %v", err)
		return nil
	})
	if r.err != nil {
		e.Errorf("TryAcquire with context.Background() against a frozen server: %v after %v (documented bound %v, allowed %v)",
			r.err, r.took.Round(time.Millisecond), e.h.AttemptBound, bound)
	}
	e.figure("try-acquire-frozen", r.took)
}

// acquireAndDrop acquires key (with try: once) and releases what it got.
func acquireAndDrop(ctx context.Context, lk *lock.Locker, key string, try ...bool) error {
	var l *lock.Lock
	var err error
	if len(try) > 0 && try[0] {
		l, err = lk.TryAcquire(ctx, key)
	} else {
		l, err = lk.Acquire(ctx, key)
	}
	if err == nil {
		_ = l.Release(context.Background())
	}
	return err
}

func (e *env) needURL() {
	if e.h.URL == "" {
		e.Skip("Harness.URL is empty: the suite cannot call lock.Open on this backend")
	}
}

// withQuery returns the harness URL with a query parameter set.
func (e *env) withQuery(name, value string) string {
	e.Helper()
	return withQueryOf(e, e.h.URL, name, value)
}

// callResult is what a bounded call returned, and how long it took.
type callResult struct {
	err  error
	took time.Duration
}

// boundedCall runs call in the background and reports whether it returned
// within bound; the property waits for it at its end.
func (e *env) boundedCall(wg *sync.WaitGroup, what string, bound time.Duration, call func() error) <-chan callResult {
	errc := make(chan error, 1)
	began := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- call()
	}()
	out := make(chan callResult, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case err := <-errc:
			out <- callResult{err, time.Since(began)}
		case <-t.C:
			out <- callResult{errOverran, time.Since(began)}
			<-errc
		}
	}()
	return out
}

var errOverran = errors.New("did not return in time")

// openAgainstFrozen opens rawURL without a deadline of its own against the
// frozen backend: it must fail (the server cannot be verified) within bound.
func (e *env) openAgainstFrozen(wg *sync.WaitGroup, what, rawURL string, bound time.Duration) <-chan callResult {
	return e.boundedCall(wg, what, bound, func() error {
		lk, err := lock.Open(context.Background(), rawURL, lock.WithTTL(e.ttl))
		if err == nil {
			_ = lk.Close()
			return errors.New("succeeded against a frozen server: Open must verify the backend")
		}
		if errors.Is(err, lock.ErrInvalidURL) {
			return err
		}
		return nil
	})
}

// lockerHolding opens a Locker from rawURL before the freeze, holds a lock
// on it; the property closes it.
func (e *env) lockerHolding(rawURL string) (*lock.Locker, error) {
	lk, err := lock.Open(e.ctx, rawURL, lock.WithTTL(e.ttl))
	if err != nil {
		return nil, err
	}
	e.Cleanup(func() { _ = lk.Close() })
	if _, err := lk.Acquire(e.ctx, e.key+"/held-by-url-locker"); err != nil {
		e.Fatalf("Acquire on a Locker from the URL: %v", err)
	}
	return lk, nil
}

// lock.Open with open_timeout and Locker.Close with close_timeout (URL
// parameters) keep their bounds against a frozen server, without a deadline of
// the caller's.
func testOpenAndCloseHonourTimeoutsAgainstFrozenServer(e *env) {
	e.needFreeze()
	e.needURL()
	const openTimeout, closeTimeout = time.Second, 500 * time.Millisecond
	lk, err := e.lockerHolding(e.withQuery("close_timeout", closeTimeout.String()))
	if err != nil {
		e.Fatalf("lock.Open with close_timeout=%v: %v", closeTimeout, err)
	}
	var wg sync.WaitGroup
	e.Cleanup(wg.Wait)
	e.freeze()
	openBound := openTimeout + callSlack
	open := e.openAgainstFrozen(&wg, "Open", e.withQuery("open_timeout", openTimeout.String()), openBound)
	closeBound := closeTimeout + driverCloseBound + callSlack
	closed := e.boundedCall(&wg, "Close", closeBound, func() error { _ = lk.Close(); return nil })
	if r := <-open; r.err != nil {
		e.Errorf("lock.Open with open_timeout=%v against a frozen server: %v (bound %v)", openTimeout, r.err, openBound)
	} else if r.took < openTimeout*9/10 {
		// A frozen server accepts connections (the kernel does) and answers
		// nothing: no refusal, so the answer is unknown until the timeout.
		e.Errorf("lock.Open with open_timeout=%v against a frozen server failed after %v, before its timeout: silence is not a refusal", openTimeout, r.took.Round(time.Millisecond))
	}
	if r := <-closed; r.err != nil {
		e.Errorf("Close of a Locker holding a lock, with close_timeout=%v, against a frozen server: %v (bound %v)", closeTimeout, r.err, closeBound)
	}
}

// Without open_timeout or close_timeout, and without a deadline of the caller's,
// lock.Open and Locker.Close still return against a frozen server, within their
// default bounds. (Slow: the bounds are seconds.)
func testOpenAndCloseHaveDefaultBoundsAgainstFrozenServer(e *env) {
	e.needFreeze()
	e.needURL()
	lk, err := e.lockerHolding(e.h.URL)
	if err != nil {
		e.Fatalf("lock.Open: %v", err)
	}
	var wg sync.WaitGroup
	e.Cleanup(wg.Wait)
	e.freeze()
	openBound := lock.DefaultOpenTimeout + callSlack
	open := e.openAgainstFrozen(&wg, "Open", e.h.URL, openBound)
	closeBound := lock.DefaultCloseTimeout + driverCloseBound + callSlack
	closed := e.boundedCall(&wg, "Close", closeBound, func() error { _ = lk.Close(); return nil })
	if r := <-closed; r.err != nil {
		e.Errorf("Close of a Locker holding a lock against a frozen server: %v (bound %v)", r.err, closeBound)
	} else {
		e.figure("close-frozen", r.took)
	}
	if r := <-open; r.err != nil {
		e.Errorf("lock.Open without a deadline against a frozen server: %v (bound %v)", r.err, openBound)
	} else {
		e.figure("open-frozen", r.took)
	}
}

// A waiter whose context outlasts a restart of the backend (data kept) comes
// through it and gets the lock: errors while the backend is away are transient.
func testWaiterSurvivesBackendRestart(e *env) {
	if e.h.RestartBackend == nil {
		e.Skip("Harness.RestartBackend is nil: this harness cannot restart its backend")
	}
	a, b := e.client(), e.client()
	l := e.acquire(a, e.key)
	const waiterCtx = 30 * time.Second
	got := make(chan error, 1)
	var l2 *lock.Lock
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, waiterCtx)
		defer cancel()
		var err error
		l2, err = b.Acquire(ctx, e.key)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it wait
	began := time.Now()
	if err := e.h.RestartBackend(e.ctx); err != nil {
		e.Fatalf("Harness.RestartBackend: %v", err)
	}
	e.acceptGoroutines()
	e.Logf("the backend restarted in %v", time.Since(began))
	e.releaseAfterFault(l)
	if err := <-got; err != nil {
		e.Fatalf("a waiter with a %v context did not come through a %v restart: %v", waiterCtx, time.Since(began).Round(time.Millisecond), err)
	}
	e.release(l2)
}
