package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/durtext"
)

// Acquire blocks until it holds the lock on key, ctx is done, or the Locker is
// closed. Drivers whose backend can wake a waiter (Capabilities().Notify) wait for
// that; others retry with jittered exponential backoff (WithBackoff). A transient
// backend failure (an error matching ErrUnavailable: the backend unreachable,
// restarting, failing over) is retried with the same backoff for as long as ctx
// allows, with the same owner identity, so a lost reply can neither orphan a lock
// nor block its own owner; a permanent one (ErrBackend, ErrUnsupported) fails at
// once. A grant whose validity is already gone or nearly gone when it arrives (the
// backend stalled while the request was in flight) is released and the wait goes
// on: Acquire never returns a lock that is already expired. When Acquire fails it
// leaves nothing behind on the backend.
func (lk *Locker) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lock, error) {
	return lk.acquire(ctx, "acquire", key, false, opts)
}

// TryAcquire makes one attempt to take the lock and returns an error matching
// ErrLocked at once if another owner holds it, or matching ErrUnavailable if the
// backend could not be asked.
func (lk *Locker) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lock, error) {
	return lk.acquire(ctx, "try-acquire", key, true, opts)
}

// cleanupTimeout bounds the best-effort release after a failed acquire.
const cleanupTimeout = 5 * time.Second

// cleanupWait is how long a failed acquire waits for its cleanup before it
// returns and lets the cleanup finish in the background: a healthy backend
// answers well within it, so the call returns with nothing left behind, and an
// unresponsive one does not hold the call far past its context.
const cleanupWait = 250 * time.Millisecond

// errStaleGrant is the cause of a TryAcquire whose grant arrived too late to be
// trusted.
var errStaleGrant = fmt.Errorf("%w: the grant arrived after most of its validity had passed (the backend or the network stalled)", ErrUnavailable)

func (lk *Locker) acquire(parent context.Context, op, key string, try bool, opts []Option) (*Lock, error) {
	if err := checkContext(parent, op, key); err != nil {
		return nil, err
	}
	ctx, a := lk.tel.startAcquire(parent, op, key)
	l, err := lk.acquireLoop(ctx, op, key, try, opts, a)
	a.end(ctx, key, err)
	return l, err
}

func (lk *Locker) acquireLoop(parent context.Context, op, key string, try bool, opts []Option, a *acquireSpan) (*Lock, error) {
	if err := validateKey(key); err != nil {
		return nil, &Error{Op: op, Key: key, Err: err}
	}
	if err := parent.Err(); err != nil {
		return nil, &Error{Op: op, Key: key, Err: err}
	}
	o := lk.defaults
	if len(opts) > 0 {
		// Only here do the options (unknown functions) make o escape.
		o = o.apply(opts)
	}
	if err := lk.validate(&o); err != nil {
		return nil, &Error{Op: op, Key: key, Err: err}
	}
	seq := lk.owners.next()
	ctx, c, err := lk.track(parent, seq)
	if err != nil {
		return nil, &Error{Op: op, Key: key, Err: err}
	}
	defer lk.untrack(c)

	// The first attempt's start is also the label's since: one reading of
	// the clock (which costs as much as a tenth of the whole call on some
	// virtual machines) for both. Read before the request is made, it is a
	// start no later than the request's, as the validity rule needs.
	start := time.Now()
	l := lk.newLock(key, seq, &o, start)
	req := &l.req
	ctx = lk.tel.wakeContext(ctx, key)
	bo := backoffState{b: o.backoff}
	var lastErr error // the last transient failure, reported if ctx ends
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			start = time.Now()
		}
		var g driver.Grant
		if !try && lk.acquirer != nil {
			g, err = lk.acquirer.Acquire(ctx, req)
		} else {
			g, err = lk.d.TryAcquire(ctx, req)
		}
		if a != nil {
			a.attempt(attempt, classify(err))
		}
		switch {
		case err == nil:
			lk.tel.backendResult(ctx, op, key, nil)
			if !lk.fresh(l, g, start) {
				// Too late to be trusted: give it back, and look again. The
				// release completes (or fails) before the next attempt, which
				// would otherwise find the same stale grant.
				if try {
					lk.cleanup(req)
					return nil, &Error{Op: op, Key: key, Err: errStaleGrant}
				}
				if rerr := lk.d.Release(ctx, req); rerr != nil && !isNotHeld(rerr) {
					lastErr = classify(rerr)
				} else {
					lastErr = errStaleGrant
				}
				break
			}
			if !g.Start.IsZero() {
				a.granted(g.Start)
			} else {
				a.granted(start)
			}
			if err := lk.hold(l, g, start, a); err != nil {
				lk.cleanup(req)
				return nil, &Error{Op: op, Key: key, Err: err}
			}
			return l, nil
		case errors.Is(err, ErrLocked) && ctx.Err() == nil:
			if try {
				return nil, &Error{Op: op, Key: key, Err: err}
			}
			lastErr = nil
		case ctx.Err() != nil:
			// The driver may have acted before it saw the cancellation.
			lk.cleanup(req)
			if lk.isClosed() && parent.Err() == nil {
				return nil, &Error{Op: op, Key: key, Err: ErrClosed}
			}
			return nil, &Error{Op: op, Key: key, Err: withLast(ctx.Err(), lastErr)}
		default:
			// A backend error leaves the outcome unknown: the lock may be ours.
			err = classify(err)
			lk.tel.backendResult(ctx, op, key, err)
			if try || !isTransient(err) || errors.Is(err, ErrClosed) {
				lk.cleanup(req)
				return nil, &Error{Op: op, Key: key, Err: err}
			}
			lastErr = err
		}
		pause := bo.next()
		a.wait(pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			lk.cleanup(req)
			if lk.isClosed() && parent.Err() == nil {
				return nil, &Error{Op: op, Key: key, Err: ErrClosed}
			}
			return nil, &Error{Op: op, Key: key, Err: withLast(ctx.Err(), lastErr)}
		case <-t.C:
			lk.tel.woke(key, driver.WakeTimer) // the backoff's retry
		}
	}
}

// withLast joins the context's error with the backend failure that kept the
// call from succeeding before it ended, so both can be matched.
func withLast(ctxErr, last error) error {
	if last == nil {
		return ctxErr
	}
	return fmt.Errorf("%w (last attempt: %w)", ctxErr, last)
}

// minValidity is how much of a grant's validity must remain when it arrives for
// Acquire to return it: a third of the TTL, the time at which it would be
// refreshed anyway.
func minValidity(ttl time.Duration) time.Duration { return ttl / 3 }

// fresh reports whether a grant still has enough validity left to be returned:
// a grant that arrives late (the backend stalled with the request in flight) may
// already have expired on the backend and been given to someone else.
func (lk *Locker) fresh(l *Lock, g driver.Grant, start time.Time) bool {
	if !g.Start.IsZero() {
		start = g.Start
	}
	return time.Until(start.Add(l.validity())) >= minValidity(l.req.TTL)
}

// cleanup releases whatever an interrupted or failed acquire may have left on the
// backend. The owner check makes it harmless when nothing was taken. It runs in
// the background, as one of the Locker's calls (so Close waits for it, up to the
// close timeout), and the caller waits for it at most cleanupWait.
func (lk *Locker) cleanup(req *driver.Request) {
	done := make(chan struct{})
	lk.gate.add() // the failing call still counts as one, so Close has not stopped waiting
	go func() {
		defer lk.gate.done()
		defer close(done)
		ctx, cancel := context.WithTimeout(lk.cleanupCtx, cleanupTimeout)
		defer cancel()
		_ = lk.d.Release(ctx, req)
	}()
	t := time.NewTimer(cleanupWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (lk *Locker) validate(o *options) error {
	if o.err != nil {
		return o.err
	}
	if o.required != 0 {
		if err := missingCapabilities(o.required, lk.caps); err != nil {
			return err
		}
	}
	if min, max := lk.caps.TTLRange(); o.ttl < min || o.ttl > max {
		return fmt.Errorf("%w: TTL %s is outside this backend's range [%s, %s]", ErrInvalidArgument, durtext.Format(o.ttl), durtext.Format(min), durtext.Format(max))
	}
	if o.grace >= o.ttl/2 {
		return fmt.Errorf("%w: grace %s must be shorter than half the TTL %s", ErrInvalidArgument, durtext.Format(o.grace), durtext.Format(o.ttl))
	}
	if !o.autoRefresh && !lk.caps.Expiring {
		return fmt.Errorf("%w: turning automatic refresh off (locks on this backend live as long as the session, they cannot expire)", ErrUnsupported)
	}
	if o.shared && o.permits > 0 {
		return fmt.Errorf("%w: WithShared and WithPermits together; a key is either a read-write lock or a semaphore", ErrInvalidArgument)
	}
	if o.shared && !lk.caps.Shared {
		return fmt.Errorf("%w: shared locks", ErrUnsupported)
	}
	if o.permits > 1 && !lk.caps.Permits {
		return fmt.Errorf("%w: semaphores (WithPermits above 1)", ErrUnsupported)
	}
	return nil
}

// newLock makes the lock of an acquire call: its request, with the owner id of
// sequence number seq and the label, in one allocation beside the Lock's own.
func (lk *Locker) newLock(key string, seq uint64, o *options, now time.Time) *Lock {
	l := &Lock{lk: lk, index: -1, shardIdx: uint8(seq & uint64(len(lk.shards)-1))}
	if o.autoRefresh {
		l.flags = flagAuto
	}
	if o.grace > 0 {
		// Made now, before the lock is shared, so that validity can read the
		// grace without a lock.
		l.ext.Store(&lockExt{lost: make(chan struct{}), grace: o.grace})
	}
	l.req = driver.Request{Key: key, TTL: o.ttl, Shared: o.shared}
	if o.permits > 1 {
		l.req.Permits = o.permits // one permit is the exclusive lock
	}
	l.req.Owner, l.req.Label = lk.ownerAndLabel(seq, o.owner(), now, o.value)
	l.req.Lost = (*lossReporter)(l) // the lock itself: no closure to allocate
	return l
}

// hold records a granted lock and schedules its refresh and validity deadline,
// measured from start, the moment before the request was sent; a is the
// acquisition's span, the hold span's link.
func (lk *Locker) hold(l *Lock, g driver.Grant, start time.Time, a *acquireSpan) error {
	sh := l.shard()
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return ErrClosed
	}
	if !g.Start.IsZero() {
		// The driver knows when the granting request went out, which may be an
		// earlier attempt whose reply was lost, or a later moment of a wait.
		start = g.Start
	}
	l.token = g.Token
	l.state = stateHeld
	lk.tel.held(l, a)
	l.deadline = lk.at(start) + instant(l.validity())
	if l.auto() {
		l.nextRefresh = lk.at(start) + instant(driver.RefreshInterval(l.req.TTL))
	}
	sh.scheduleLocked(l) // the schedule is also the set of held locks Close releases
	early := l.cause()
	var hooks func(error)
	if early != nil {
		hooks = l.endLocked(sh, stateLost, early)
	}
	sh.mu.Unlock()
	runHooks(hooks, early)
	return nil
}
