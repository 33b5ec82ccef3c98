package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/lock"
)

// minGrantValidity is the least validity a lock must have left when Acquire
// returns it, as a fraction of its TTL: a grant with less is of no use to its
// holder, and one whose validity is already gone is a second holder.
const minGrantValidityDivisor = 10

// ledger is the suite's bookkeeping of who holds a lock: every grant is checked
// against the locks still held, and (with fencing) against every earlier token.
type ledger struct {
	mu       sync.Mutex
	live     map[*lock.Lock]time.Time // held and not being released, by grant time
	maxToken uint64
	fencing  bool
	grants   []time.Time
	failures []string
	acqErrs  int
}

func newLedger(fencing bool) *ledger {
	return &ledger{live: map[*lock.Lock]time.Time{}, fencing: fencing}
}

func (b *ledger) fail(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = append(b.failures, fmt.Sprintf(format, args...))
}

// granted checks a lock Acquire just returned and records it as held.
func (b *ledger) granted(l *lock.Lock, at time.Time) {
	lostAtReturn := isClosed(l.Lost())
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grants = append(b.grants, at)
	if lostAtReturn {
		b.failures = append(b.failures, "Acquire returned a lock whose Lost had already closed: its validity was gone")
		return
	}
	for other, since := range b.live {
		if !isClosed(other.Lost()) {
			b.failures = append(b.failures, fmt.Sprintf("two holders at once: a lock granted %v earlier is still held and its Lost open", at.Sub(since)))
		}
	}
	if b.fencing {
		tok := l.Token()
		if tok <= b.maxToken {
			b.failures = append(b.failures, fmt.Sprintf("token %d granted after token %d: fencing tokens must strictly increase", tok, b.maxToken))
		}
		if tok > b.maxToken {
			b.maxToken = tok
		}
	}
	b.live[l] = at
}

// lostCause checks that l, lost, reports ErrLost and cause (when not nil)
// through Err, as causeIs matches them.
func (b *ledger) lostCause(l *lock.Lock, cause error, causeIs func(err, cause error) bool) {
	err := l.Err()
	switch {
	case !errors.Is(err, lock.ErrLost):
		b.fail("Err() of a lock lost across the freeze = %v, want an error matching ErrLost", err)
	case cause != nil && !causeIs(err, cause):
		b.fail("Err() of a lock lost across the freeze = %v, want the cause %q", err, cause)
	}
}

func (b *ledger) setLive(l *lock.Lock, at time.Time, live bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if live {
		b.live[l] = at
	} else {
		delete(b.live, l)
	}
}

func (b *ledger) grantsSince(t time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, g := range b.grants {
		if !g.Before(t) {
			n++
		}
	}
	return n
}

// waitGrants waits until at least n grants were recorded since t, or d passed.
func (b *ledger) waitGrants(ctx context.Context, n int, t time.Time, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for b.grantsSince(t) < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling the ledger, not ordering events
	}
	return true
}

// Several clients contend for one key while the server is frozen for longer
// than the TTL and then thawed. Whatever the clients had sent before the stall
// is answered after it: no Acquire may return a lock whose validity is gone or
// nearly so, and at no moment may two holders both have their Lost open; tokens
// keep increasing. A lock held across the stall is lost by its end, and it
// and any lock lost meanwhile (its holder heard nothing past its validity)
// report the cause the driver documents for silence (Harness.PartitionCause).
func testStalledServerNeverGrantsExpiredLock(e *env) {
	e.needFreeze()
	const clients = 3
	minValidity := e.ttl / minGrantValidityDivisor
	book := newLedger(e.caps.Fencing)
	stop, stopAll := context.WithCancel(e.ctx)
	defer stopAll()
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		lk := e.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			contend(e, lk, book, stop, minValidity, e.h.PartitionCause)
		}()
	}
	e.Cleanup(wg.Wait) // after the thaw that e.freeze registers

	start := time.Now()
	if !book.waitGrants(e.ctx, 2, start, 10*time.Second) {
		e.Fatalf("no contention to stall: fewer than 2 grants in 10s before the freeze")
	}
	// A lock of another key held across the stall: its refreshes go
	// unanswered until its validity runs out.
	across := e.acquire(e.client(), e.key+"/held-across-the-freeze")
	e.freeze()
	// Time must pass: the stall must outlast the TTL.
	time.Sleep(e.ttl * 3 / 2)
	e.thaw()
	thawed := time.Now()
	if !isClosed(across.Lost()) {
		e.Errorf("Lost of a lock held across a freeze of %v did not close (TTL %v)", e.ttl*3/2, e.ttl)
	} else {
		e.checkCause(across, e.h.PartitionCause, "a lock held while the server was frozen past its validity")
	}
	e.releaseAfterFault(across)
	const after = 3
	bound := 2*e.ttl + e.h.SessionTimeout + 10*time.Second
	if !book.waitGrants(e.ctx, after, thawed, bound) {
		e.Errorf("only %d grants within %v after the server was thawed, want %d: waiters did not survive the stall", book.grantsSince(thawed), bound, after)
	}
	stopAll()
	wg.Wait()
	afterThaw := book.grantsSince(thawed)
	book.mu.Lock()
	defer book.mu.Unlock()
	e.Logf("%d grants (%d after the thaw), %d Acquire errors", len(book.grants), afterThaw, book.acqErrs)
	for i, f := range book.failures {
		if i == 10 {
			e.Errorf("... and %d more failures", len(book.failures)-i)
			break
		}
		e.Error(f)
	}
}

// contend acquires and releases key on lk until stop ends, recording every grant
// and checking that a lock lost meanwhile reports cause (when not nil).
func contend(e *env, lk *lock.Locker, book *ledger, stop context.Context, minValidity time.Duration, cause error) {
	for stop.Err() == nil {
		l, err := lk.Acquire(stop, e.key)
		if err != nil {
			if stop.Err() != nil {
				return
			}
			book.mu.Lock()
			book.acqErrs++
			book.mu.Unlock()
			pause(stop, 20*time.Millisecond)
			continue
		}
		at := time.Now()
		book.granted(l, at)
		// Hold it for minValidity: a grant with less left loses it meanwhile.
		t := time.NewTimer(minValidity)
		select {
		case <-l.Lost():
			if took := time.Since(at); took < minValidity {
				book.fail("Lost closed %v after Acquire returned the lock: the grant had less than %v (TTL/%d) of validity left", took, minValidity, minGrantValidityDivisor)
			}
		case <-t.C:
		}
		t.Stop()
		for {
			book.setLive(l, at, false)
			err := l.Release(e.ctx)
			if errors.Is(err, lock.ErrLost) {
				book.lostCause(l, cause, e.causeIs)
			}
			if err == nil || errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrLost) || e.ctx.Err() != nil {
				break
			}
			// The backend could not be reached: the lock is still held.
			book.setLive(l, at, true)
			pause(e.ctx, 20*time.Millisecond)
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
