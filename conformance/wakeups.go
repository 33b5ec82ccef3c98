package conformance

import (
	"context"
	"fmt"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/waketest"
)

// wakeHandoffs is how many handoffs AHandoffWakesTheWaiterByNotification
// makes at most: the driver's fallback may happen to look just before the
// notification arrives (etcd's early re-reads), so the property needs one
// handoff of several to be woken by the backend, never all of them.
const wakeHandoffs = 10

// A release wakes a blocked waiter by the backend's notification on drivers
// that declare Notify, and the driver says so through driver.Woke
// (what the distlock.acquire.wakeups metric counts): within wakeHandoffs
// handoffs, at least one wake-up is reported as driver.WakeNotified, and
// every wake-up reported is of a defined source. A driver that polls, or that
// never reports its wake-ups, fails. The release waits until Inspect counts
// the waiter, so drivers that cannot count waiters are skipped.
func testAHandoffWakesTheWaiterByNotification(e *env) {
	if !e.caps.Notify {
		e.Skip("driver declares no backend wake-up (Capabilities.Notify is false): its waiters are retried by the portable layer's backoff, counted as timer wake-ups")
	}
	holder := e.client()
	if in, err := holder.Inspect(e.ctx, e.key); err != nil || in.Waiters < 0 {
		e.Skipf("Inspect counts no waiters on this driver (waiters %d, %v): the suite cannot tell that the waiter blocked before the release, which would otherwise overtake it; the driver's own tests check its wake-up sources", in.Waiters, err)
	}
	d, err := e.h.NewDriver(e.ctx)
	if err != nil {
		e.Fatalf("Harness.NewDriver: %v", err)
	}
	rec := &wakeRecorder{Driver: d, acq: d.(driver.Acquirer), entered: make(chan struct{}, 1)}
	waiter := e.locker(rec)
	for i := 1; i <= wakeHandoffs; i++ {
		l := e.acquire(holder, e.key)
		got := make(chan error, 1)
		go func() {
			l2, err := waiter.Acquire(e.ctx, e.key)
			if err == nil {
				err = l2.Release(e.ctx)
			}
			got <- err
		}()
		select {
		case <-rec.entered:
		case <-e.ctx.Done():
			e.Fatal("the waiter's Acquire never reached the driver")
		}
		e.eventually("the waiter to queue", func() (bool, string) {
			in, err := holder.Inspect(e.ctx, e.key)
			return err == nil && in.Waiters > 0, fmt.Sprintf("%+v %v", in, err)
		})
		e.release(l)
		select {
		case err := <-got:
			if err != nil {
				e.Fatalf("waiter: %v", err)
			}
		case <-e.ctx.Done():
			e.Fatal("the waiter never acquired")
		}
		select { // a signal of a retried Acquire of this handoff
		case <-rec.entered:
		default:
		}
		notified, timer, other := rec.take()
		e.Logf("handoff %d: wake-ups by notification %d, by timer %d", i, notified, timer)
		if other > 0 {
			e.Fatalf("the driver reported %d wake-ups of an undefined source", other)
		}
		if notified > 0 {
			return
		}
	}
	e.Errorf("no wake-up by notification reported in %d handoffs to a blocked waiter: the waiter polls, or its driver does not call driver.Woke", wakeHandoffs)
}

// wakeRecorder passes a driver's Acquire through and records the wake-ups it
// reports (in place of the portable layer's reporter: the suite's Lockers
// record no metrics).
type wakeRecorder struct {
	driver.Driver
	acq     driver.Acquirer
	entered chan struct{} // signalled by each Acquire call
	wakes   waketest.Log
}

func (w *wakeRecorder) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	return w.acq.Acquire(w.wakes.Context(ctx), req)
}

// take returns the counts by source since the last take and starts again.
func (w *wakeRecorder) take() (notified, timer, other int) {
	for _, s := range w.wakes.Take() {
		switch s {
		case driver.WakeNotified:
			notified++
		case driver.WakeTimer:
			timer++
		default:
			other++
		}
	}
	return notified, timer, other
}
