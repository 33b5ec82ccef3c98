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
	lk    *Locker
	req   driver.Request                // the same for every call about the lock: drivers may key on &req
	drift time.Duration                 // taken off every validity window: driver.Drift(ttl) plus the grace
	lost  atomic.Pointer[chan struct{}] // made by the first Lost call, or closedChan once ended
	opMu  sync.Mutex                    // serialises Refresh and Release of this lock

	// Guarded by lk.mu.
	deadline    instant
	nextRefresh instant
	// cause is why the lock ended, for stateLost; before the grant is
	// recorded (stateAcquiring), a driver's loss report that came early.
	cause      error
	onLost     func(error) // run once when the lock is lost or closed
	index      int32       // in lk.schedule, -1 when not scheduled
	state      lockState
	auto       bool
	refreshing bool
	releasing  bool // a Release is under way: a refresh that finds the lock gone saw our own release
	lapsed     bool // lost by the deadline and not yet released on the backend (in lk.lapsed)
	token      uint64
	grantSeq   uint64 // the grant's number in the Locker (telemetry.serverChanged)
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
	l.lk.mu.Lock()
	defer l.lk.mu.Unlock()
	return l.token
}

// Lost returns a channel that is closed when the lock may no longer be held: the
// backend said it is gone, no refresh was confirmed before the validity deadline,
// or the Locker was closed. It is not closed by a successful Release.
func (l *Lock) Lost() <-chan struct{} {
	// Made on first use: most holders never ask (Do watches through whenLost),
	// and a channel is most of what a held lock would otherwise cost.
	if c := l.lost.Load(); c != nil {
		return *c
	}
	l.lk.mu.Lock()
	defer l.lk.mu.Unlock()
	if c := l.lost.Load(); c != nil {
		return *c
	}
	c := make(chan struct{})
	l.lost.Store(&c)
	return c
}

// Refresh confirms the lock with the backend and, on expiring backends, extends it
// to its TTL from now. With automatic refresh on (the default) there is no need to
// call it. If the lock is no longer ours it returns an error matching ErrNotHeld
// (and ErrLost), and Lost closes; it never re-creates a lock that is gone.
func (l *Lock) Refresh(ctx context.Context) error {
	if ctx == nil {
		return &Error{Op: "refresh", Key: l.req.Key, Err: fmt.Errorf("%w: nil context", ErrInvalidArgument)}
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
		l.end(stateLost, err)
		return wrapErr("refresh", l.req.Key, lostError(err))
	default:
		return wrapErr("refresh", l.req.Key, err)
	}
}

// Release gives the lock up. It is owner-checked: it never removes a lock that
// another owner now holds. If the lock had already gone (expired, lost, taken over)
// it returns an error matching ErrNotHeld and ErrLost. Releasing twice is safe:
// the second call returns nil. If the backend cannot be reached the lock stays
// held (and refreshed) and the error is returned, so Release can be retried.
//
// A lock lost because no refresh was confirmed before its validity deadline may
// still be held on the backend (a session lock whose session lives on): the
// Locker leaves it there, so that nobody else gets it while this holder may
// still be working, until Release (or Do's end, or Close) frees it; Release
// then still returns the ErrLost error.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return &Error{Op: "release", Key: l.req.Key, Err: fmt.Errorf("%w: nil context", ErrInvalidArgument)}
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
	l.lk.mu.Lock()
	l.releasing = false
	closed := l.state == stateClosed
	if err == nil {
		// Ended under the same lock that clears releasing: a refresh whose
		// answer lands in between would otherwise find the lock gone, not
		// being released, and report our own release as a loss.
		l.endLocked(stateReleased, nil)
		l.lk.mu.Unlock()
		return nil
	}
	l.lk.mu.Unlock()
	switch {
	case closed:
		// Close ended the lock while this release was under way, and its own
		// release may be what this one found gone.
		return wrapErr("release", l.req.Key, ErrClosed)
	case isNotHeld(err):
		l.end(stateLost, err)
		return wrapErr("release", l.req.Key, lostError(err))
	default:
		return wrapErr("release", l.req.Key, err)
	}
}

var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// startRelease marks a held lock as being released, or reports why it cannot be.
func (l *Lock) startRelease() error {
	l.lk.mu.Lock()
	defer l.lk.mu.Unlock()
	if err := l.usableLocked(); err != nil {
		return err
	}
	l.releasing = true
	return nil
}

// usable reports why Refresh or Release cannot act on the lock, or nil if held.
func (l *Lock) usable() error {
	l.lk.mu.Lock()
	defer l.lk.mu.Unlock()
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
		return lostError(l.cause)
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
	l.lk.mu.Lock()
	if l.state == stateAcquiring {
		if l.cause == nil {
			l.cause = err
		}
		l.lk.mu.Unlock()
		return
	}
	hooks := l.endLocked(stateLost, err)
	l.lk.mu.Unlock()
	runHooks(hooks, err)
}

// end moves a held lock to a final state, closes Lost unless it was released, and
// reports whether this call made the move.
func (l *Lock) end(s lockState, cause error) bool {
	l.lk.mu.Lock()
	if l.state != stateHeld {
		l.lk.mu.Unlock()
		return false
	}
	hooks := l.endLocked(s, cause)
	l.lk.mu.Unlock()
	runHooks(hooks, cause)
	return true
}

// endLocked does end's work with lk.mu held and returns the hooks to run after
// unlocking.
func (l *Lock) endLocked(s lockState, cause error) func(error) {
	if l.state != stateHeld {
		return nil
	}
	l.state = s
	l.cause = cause
	l.lk.tel.ended(l, s, cause)
	l.lk.unschedule(l)
	if s == stateReleased {
		return nil
	}
	if c := l.lost.Load(); c != nil {
		close(*c)
	} else {
		l.lost.Store(&closedChan)
	}
	hook := l.onLost
	l.onLost = nil
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
	l.lk.mu.Lock()
	if l.state == stateHeld || l.state == stateAcquiring {
		if prev := l.onLost; prev != nil {
			l.onLost = func(err error) { prev(err); f(err) }
		} else {
			l.onLost = f
		}
		l.lk.mu.Unlock()
		return
	}
	s, cause := l.state, l.cause
	l.lk.mu.Unlock()
	if s != stateReleased {
		if s == stateClosed {
			cause = ErrClosed
		}
		f(cause)
	}
}

// takeLapsed reports whether l was lost by its deadline and still needs a
// release on the backend, and makes the caller responsible for it.
func (lk *Locker) takeLapsed(l *Lock) bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if !l.lapsed {
		return false
	}
	l.lapsed = false
	delete(lk.lapsed, l)
	return true
}

// keepLapsed gives a lapsed lock whose release failed back to Close.
func (lk *Locker) keepLapsed(l *Lock) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if !lk.closed {
		l.lapsed = true
		lk.lapsed[l] = struct{}{}
	}
}
