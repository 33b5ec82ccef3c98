package lock

import (
	"context"
	"errors"
	"fmt"
)

// Do acquires the lock on key (waiting as Acquire does), runs fn while keeping the
// lock refreshed, and releases it. fn's context is cancelled if the lock is lost,
// so work that honours its context stops touching the resource. Do returns fn's
// error; if the lock was lost while fn ran it returns an error matching ErrLost
// (joined with fn's error, if any). The lock is released even if fn panics.
// FromContext(ctx) gives fn the Lock, for its Token.
func (lk *Locker) Do(ctx context.Context, key string, fn func(context.Context) error, opts ...AcquireOption) (err error) {
	if fn == nil {
		return &Error{Op: "do", Key: key, Err: fmt.Errorf("%w: nil function", ErrInvalidArgument)}
	}
	l, err := lk.acquire(ctx, "do", key, false, opts)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l.whenLost(func(cause error) {
		// The same error Err gives: ErrLost and the cause (ErrExpired,
		// ErrSessionExpired...), which context.Cause returns to fn.
		if !errors.Is(cause, ErrLost) {
			cause = fmt.Errorf("%w: %w", ErrLost, cause)
		}
		cancel(cause)
	})
	defer func() {
		relErr := releaseAfterDo(ctx, l.Release)
		var lost error
		select {
		case <-l.Lost():
			lost = &Error{Op: "do", Key: key, Err: lostError(l.lostCause())}
		default:
		}
		err = doOutcome(err, lost, relErr)
	}()
	return fn(&doContext{Context: fctx, l: l})
}

// releaseAfterDo releases what Do or DoAll held once fn has returned, even
// when the caller's context has ended (its values are kept), within
// cleanupTimeout.
func releaseAfterDo(ctx context.Context, release func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return release(rctx)
}

// doOutcome is what Do and DoAll return: a loss (nil if none) first, joined
// with fn's error; else fn's error; else the release's.
func doOutcome(fnErr, lost, relErr error) error {
	switch {
	case lost != nil && fnErr != nil:
		return errors.Join(lost, fnErr)
	case lost != nil:
		return lost
	case fnErr != nil:
		return fnErr
	}
	return relErr
}

func (l *Lock) lostCause() error {
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l.state == stateClosed {
		return ErrClosed
	}
	return l.cause()
}

// FromContext returns the Lock whose Do made ctx (or a context derived from
// it), so a function run by Do can pass the lock's Token to the resource's
// fence. Inside nested Do calls it returns the innermost one's Lock. It
// returns false for any other context. The Lock is valid until that Do
// returns; Do releases it, so the function must not.
func FromContext(ctx context.Context) (*Lock, bool) {
	if ctx == nil {
		return nil, false
	}
	l, ok := ctx.Value(doLockKey{}).(*Lock)
	return l, ok
}

// doLockKey is the context key under which Do's context answers with its Lock.
type doLockKey struct{}

// doContext is Do's context (with l) or DoAll's (with s): fn's cancellable
// context, answering FromContext's or SetFromContext's question itself; one
// small allocation per call. The other question goes to the parent, so a Do
// inside a DoAll (or the reverse) finds both.
type doContext struct {
	context.Context
	l *Lock
	s *LockSet
}

func (c *doContext) Value(key any) any {
	switch {
	case key == (doLockKey{}) && c.l != nil:
		return c.l
	case key == (doAllSetKey{}) && c.s != nil:
		return c.s
	}
	return c.Context.Value(key)
}
