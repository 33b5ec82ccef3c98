package main

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// A keeper refreshes a lock on an expiring backend (Redis, Redlock, etcd) in
// distlock's place of the Locker's automatic refresh, so that distlock knows when
// the last refresh was confirmed. The backend frees the lock TTL after the last
// refresh it saw (no earlier than TTL after the confirmed refresh was sent); the
// Locker's Lost fires only the drift allowance before that, too late for the
// command to stop in its --grace. The keeper stops trusting the lock window =
// TTL − drift − grace after the last confirmed refresh, which leaves the command
// its grace before anyone else can be granted the lock, as long as distlock
// itself is not paused and its clock runs at a sane rate.
type keeper struct {
	l      *lock.Lock
	window time.Duration

	untrusted chan struct{} // closed when the window passed without a confirmed refresh
	cancel    context.CancelFunc
	done      chan struct{} // closed when the goroutine has returned
}

// keep confirms l at once (the grant's own start is not known to distlock) and
// then keeps refreshing it until stop. It returns an error if the first refresh
// fails: the lock is then not trusted enough to start the command.
func keep(l *lock.Lock, ttl, grace time.Duration) (*keeper, error) {
	window := trustWindow(ttl, grace)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	err := l.Refresh(ctx)
	cancel()
	if err != nil {
		return nil, err
	}
	ctx, cancel = context.WithCancel(context.Background())
	k := &keeper{l: l, window: window, untrusted: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go k.run(ctx, start)
	return k, nil
}

// trustWindow is how long distlock trusts a lock on an expiring backend after
// a confirmed refresh.
func trustWindow(ttl, grace time.Duration) time.Duration {
	return ttl - driver.Drift(ttl) - grace
}

// Untrusted is closed when no refresh was confirmed for the window: the command
// must be stopped now to be gone before the backend can free the lock.
func (k *keeper) Untrusted() <-chan struct{} { return k.untrusted }

// stop ends the refreshes and waits for the goroutine.
func (k *keeper) stop() {
	k.cancel()
	<-k.done
}

func (k *keeper) run(ctx context.Context, confirmed time.Time) {
	defer close(k.done)
	trustedUntil := confirmed.Add(k.window)
	next := confirmed.Add(k.window / 3)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if !time.Now().Before(trustedUntil) {
			close(k.untrusted)
			return
		}
		start := time.Now()
		rctx, cancel := context.WithDeadline(ctx, trustedUntil)
		err := k.l.Refresh(rctx)
		cancel()
		switch {
		case err == nil:
			trustedUntil = start.Add(k.window)
			next = start.Add(k.window / 3)
		case errors.Is(err, lock.ErrNotHeld), errors.Is(err, lock.ErrClosed):
			// The lock is gone and Lost is closed; the command is stopped
			// for that.
			return
		default:
			// Not confirmed (unreachable, slow): try again soon until the
			// window ends.
			next = time.Now().Add(max(k.window/10, 5*time.Millisecond))
		}
		wake := next
		if trustedUntil.Before(wake) {
			wake = trustedUntil
		}
		timer.Reset(time.Until(wake))
	}
}
