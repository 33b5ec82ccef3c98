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
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer rcancel()
		relErr := l.Release(rctx)
		select {
		case <-l.Lost():
			lost := &Error{Op: "do", Key: key, Err: lostError(l.lostCause())}
			if err != nil {
				err = errors.Join(lost, err)
			} else {
				err = lost
			}
		default:
			if err == nil && relErr != nil {
				err = relErr
			}
		}
	}()
	return fn(fctx)
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
