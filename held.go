package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
)

// Lock is a held lock, returned by Acquire and TryAcquire. Its methods are safe for
// concurrent use. While it is held and automatic refresh is on, the Locker keeps it
// alive; Lost tells when it may no longer be held.
type Lock struct {
	lk   *Locker
	req  driver.Request          // the same for every call about the lock: drivers may key on &req
	ext  atomic.Pointer[lockExt] // what only some locks need: made on first need, under the shard's mu
	opMu sync.Mutex              // serialises Refresh and Release of this lock

	// Guarded by the mu of the lock's shard (lk.shards[shardIdx]).
	deadline    instant
	nextRefresh instant
	token       uint64
	index       int32 // in the shard's schedule, -1 when not scheduled
	state       lockState
	flags       lockFlags
	shardIdx    uint8 // set once, before the lock is shared
}

// The layout of Lock is what a held lock costs the portable layer, so its
// fields are few and packed: small ones share one word, and what most locks
// never need (the Lost channel, a loss cause, Do's hook) lives in lockExt,
// made on first need: a lock taken and released without a look at Lost never
// makes it.

// lockExt is the part of a Lock that most locks never need. lost is set when
// it is made and never changes, so Lost reads it without a lock; the rest is
// guarded by the shard's mu.
type lockExt struct {
	lost chan struct{} // closed when the lock is lost or closed; closedChan if made after that
	// cause is why the lock ended, for stateLost; before the grant is
	// recorded (stateAcquiring), a driver's loss report that came early.
	cause  error
	onLost func(error) // run once when the lock is lost or closed
	// grace is WithGrace's, set when the lock is made (only a lock with a
	// grace has a lockExt from the start) and never changed.
	grace time.Duration
}

// validity is how long a grant or refresh keeps the lock valid, from the
// moment its request went out: the TTL less the drift allowance
// (driver.Drift) and the grace.
func (l *Lock) validity() time.Duration {
	v := l.req.TTL - driver.Drift(l.req.TTL)
	if e := l.ext.Load(); e != nil {
		v -= e.grace
	}
	return v
}

// lossReporter is a Lock as its request's driver.LossReporter: a conversion
// of the Lock's pointer, which an interface holds without an allocation.
type lossReporter Lock

// Lost implements driver.LossReporter.
func (r *lossReporter) Lost(err error) { (*Lock)(r).driverLost(err) }

// lockFlags are a Lock's booleans, guarded by its shard's mu.
type lockFlags uint8

const (
	flagAuto              lockFlags = 1 << iota // automatic refresh (set once, before the lock is shared)
	flagRefreshing                              // an automatic refresh is under way
	flagReleasing                               // a Release is under way: a refresh that finds the lock gone saw our own release
	flagLapsed                                  // lost by the deadline and not yet released on the backend (in the shard's lapsed)
	flagReleaseUnanswered                       // a Release got no answer: it may have removed the lock on the backend
)

func (l *Lock) has(f lockFlags) bool { return l.flags&f != 0 }
func (l *Lock) auto() bool           { return l.flags&flagAuto != 0 }

func (l *Lock) set(f lockFlags, on bool) {
	if on {
		l.flags |= f
	} else {
		l.flags &^= f
	}
}

// cause returns why the lock ended (or the early loss report); the shard's mu is held.
func (l *Lock) cause() error {
	if e := l.ext.Load(); e != nil {
		return e.cause
	}
	return nil
}

// extLocked returns l's lockExt, made if need be; the shard's mu is held.
func (l *Lock) extLocked() *lockExt {
	if e := l.ext.Load(); e != nil {
		return e
	}
	e := &lockExt{lost: closedChan}
	if l.state == stateAcquiring || l.state == stateHeld || l.state == stateReleased {
		e.lost = make(chan struct{})
	}
	l.ext.Store(e)
	return e
}

type lockState uint8

const (
	stateAcquiring lockState = iota
	stateHeld
	stateReleased
	stateLost
	stateClosed
)

// closedChan is the Lost channel of a lock that ended before anyone asked for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Key returns the lock's key.
func (l *Lock) Key() string { return l.req.Key }

// Token returns the fencing token: at least 1, and strictly greater than the token
// of every earlier holder of the same key. Pass it to the resource the lock
// protects so the resource can reject a stale holder. On a driver without fencing
// (Capabilities().Fencing is false) Token panics with an *Error matching
// ErrUnsupported rather than return a token that protects nothing.
func (l *Lock) Token() uint64 {
	if !l.lk.caps.Fencing {
		panic(&Error{Op: "token", Key: l.req.Key, Err: fmt.Errorf("%w: fencing tokens", ErrUnsupported)})
	}
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return l.token
}

// Lost returns a channel that is closed when the lock may no longer be held: the
// backend said it is gone, no refresh was confirmed before the validity deadline,
// or the Locker was closed. It is not closed by a successful Release.
func (l *Lock) Lost() <-chan struct{} {
	// Made on first use: most holders never ask (Do watches through whenLost),
	// and a channel is most of what a held lock would otherwise cost.
	if e := l.ext.Load(); e != nil {
		return e.lost
	}
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return l.extLocked().lost
}

// Refresh confirms the lock with the backend and, on expiring backends, extends it
// to its TTL from now. With automatic refresh on (the default) there is no need to
// call it. If the lock is no longer ours it returns an error matching ErrNotHeld
// (and ErrLost), and Lost closes; it never re-creates a lock that is gone.
func (l *Lock) Refresh(ctx context.Context) error {
	if err := checkContext(ctx, "refresh", l.req.Key); err != nil {
		return err
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if err := l.usable(); err != nil {
		return wrapErr("refresh", l.req.Key, err)
	}
	start := time.Now()
	err := classify(l.lk.d.Refresh(ctx, &l.req))
	l.lk.tel.refreshed(l, err)
	switch {
	case err == nil:
		l.lk.confirmed(l, start)
		return nil
	case isNotHeld(err):
		return wrapErr("refresh", l.req.Key, l.notHeld(err))
	default:
		return wrapErr("refresh", l.req.Key, err)
	}
}

// notHeld ends the lock as lost on the backend's answer err (ErrNotHeld) to
// a call of the holder's, and returns the call's error. When the lock ended
// while the backend answered, the answer may be that ending's own doing
// (Close's release), so it returns what ended it.
func (l *Lock) notHeld(err error) error {
	if !l.end(stateLost, err) {
		if uerr := l.usable(); uerr != nil {
			return uerr
		}
	}
	return lostError(err)
}

// Release gives the lock up. It is owner-checked: it never removes a lock that
// another owner now holds. If the lock had already gone (expired, lost, taken over)
// it returns an error matching ErrNotHeld and ErrLost. Releasing twice is safe:
// the second call returns nil. If the backend cannot be reached the lock stays
// held (and refreshed) and the error is returned, so Release can be retried;
// if that Release did reach the backend after all, the loss found next says it
// may have been its doing ("after a Release that got no answer").
//
// A lock lost because no refresh was confirmed before its validity deadline may
// still be held on the backend (a session lock whose session lives on): the
// Locker leaves it there, so that nobody else gets it while this holder may
// still be working, until Release (or Do's end, or Close) frees it; Release
// then still returns the ErrLost error.
func (l *Lock) Release(ctx context.Context) error {
	if err := checkContext(ctx, "release", l.req.Key); err != nil {
		return err
	}
	ctx, span := l.lk.tel.startRelease(ctx, l.req.Key)
	err := l.release(ctx)
	endSpan(span, err)
	return err
}

func (l *Lock) release(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if err := l.startRelease(); err != nil {
		if errors.Is(err, errReleased) {
			return nil
		}
		if l.lk.takeLapsed(l) {
			if rerr := l.lk.d.Release(ctx, &l.req); rerr != nil && !isNotHeld(rerr) {
				l.lk.keepLapsed(l)
				return wrapErr("release", l.req.Key, errors.Join(err, classify(rerr)))
			}
		}
		return wrapErr("release", l.req.Key, err)
	}
	err := classify(l.lk.d.Release(ctx, &l.req))
	l.lk.tel.backendResult(ctx, "release", l.req.Key, err)
	sh := l.shard()
	sh.mu.Lock()
	l.set(flagReleasing, false)
	closed := l.state == stateClosed
	if err != nil && !isNotHeld(err) {
		// The lock stays held, but the backend may yet run this release:
		// a loss found from now on may be its doing (see endLocked).
		l.set(flagReleaseUnanswered, true)
	}
	if err == nil {
		// Ended under the same lock that clears releasing: a refresh whose
		// answer lands in between would otherwise find the lock gone, not
		// being released, and report our own release as a loss.
		l.endLocked(sh, stateReleased, nil)
		sh.mu.Unlock()
		return nil
	}
	sh.mu.Unlock()
	switch {
	case closed:
		// Close ended the lock while this release was under way, and its own
		// release may be what this one found gone.
		return wrapErr("release", l.req.Key, ErrClosed)
	case isNotHeld(err):
		l.end(stateLost, err)
		return wrapErr("release", l.req.Key, l.usable()) // the cause as Err reports it
	default:
		return wrapErr("release", l.req.Key, err)
	}
}

var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// startRelease marks a held lock as being released, or reports why it cannot be.
func (l *Lock) startRelease() error {
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err := l.usableLocked(); err != nil {
		return err
	}
	l.set(flagReleasing, true)
	return nil
}

// usable reports why Refresh or Release cannot act on the lock, or nil if held.
func (l *Lock) usable() error {
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return l.usableLocked()
}

func (l *Lock) usableLocked() error {
	switch l.state {
	case stateHeld:
		return nil
	case stateReleased:
		return errReleased
	case stateClosed:
		return ErrClosed
	default:
		return lostError(l.cause())
	}
}

// lostError is the error for a lock that is gone: it matches ErrNotHeld and
// ErrLost, and the cause if there is one.
func lostError(cause error) error {
	if cause == nil || errors.Is(cause, ErrLost) {
		if cause == nil {
			cause = ErrLost
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, cause)
	}
	if errors.Is(cause, ErrNotHeld) {
		return fmt.Errorf("%w: %w", ErrLost, cause)
	}
	return fmt.Errorf("%w (%w): %w", ErrNotHeld, ErrLost, cause)
}

func isNotHeld(err error) bool { return errors.Is(err, ErrNotHeld) }

// driverLost is the driver's callback for a lock it learned is gone.
func (l *Lock) driverLost(err error) {
	if err == nil {
		err = ErrLost
	}
	sh := l.shard()
	sh.mu.Lock()
	if l.state == stateAcquiring {
		if e := l.extLocked(); e.cause == nil {
			e.cause = err
		}
		sh.mu.Unlock()
		return
	}
	hooks := l.endLocked(sh, stateLost, err)
	sh.mu.Unlock()
	runHooks(hooks, err)
}

// end moves a held lock to a final state, closes Lost unless it was released, and
// reports whether this call made the move.
func (l *Lock) end(s lockState, cause error) bool {
	sh := l.shard()
	sh.mu.Lock()
	if l.state != stateHeld {
		sh.mu.Unlock()
		return false
	}
	hooks := l.endLocked(sh, s, cause)
	sh.mu.Unlock()
	runHooks(hooks, cause)
	return true
}

// endLocked does end's work with the mu of l's shard sh held and returns the
// hooks to run after unlocking.
func (l *Lock) endLocked(sh *shard, s lockState, cause error) func(error) {
	if l.state != stateHeld {
		return nil
	}
	unanswered := s == stateLost && l.has(flagReleaseUnanswered) && cause != nil
	if unanswered {
		cause = fmt.Errorf("%w (after a Release that got no answer, which may have removed it)", cause)
	}
	l.state = s
	l.lk.tel.ended(l, s, cause)
	sh.unschedule(l)
	e := l.ext.Load()
	if s == stateReleased {
		if e != nil {
			e.cause = nil
		}
		return nil
	}
	if e == nil {
		// Made now, the Lost channel is closedChan: nothing to close.
		l.ext.Store(&lockExt{lost: closedChan, cause: cause})
		return nil
	}
	e.cause = cause
	close(e.lost)
	hook := e.onLost
	e.onLost = nil
	if hook != nil && unanswered {
		return func(error) { hook(cause) } // the hook learns the cause Err reports
	}
	return hook
}

func runHooks(hook func(error), cause error) {
	if hook != nil {
		hook(cause)
	}
}

// whenLost arranges for f to run once when the lock is lost or closed (at once if
// it already was). It is not run after a successful Release.
func (l *Lock) whenLost(f func(error)) {
	sh := l.shard()
	sh.mu.Lock()
	if l.state == stateHeld || l.state == stateAcquiring {
		e := l.extLocked()
		if prev := e.onLost; prev != nil {
			e.onLost = func(err error) { prev(err); f(err) }
		} else {
			e.onLost = f
		}
		sh.mu.Unlock()
		return
	}
	s, cause := l.state, l.cause()
	sh.mu.Unlock()
	if s != stateReleased {
		if s == stateClosed {
			cause = ErrClosed
		}
		f(cause)
	}
}
