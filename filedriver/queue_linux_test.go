//go:build linux

package filedriver

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/distlock/lock/driver"
)

// Waiting permit requests are granted in arrival order: four waiters, each
// from its own Driver and each blocked before the next asks, take the
// permits given back one at a time in the order they asked. (flock(2) and
// inotify set no such order: before the queue, the waiter that woke first
// took the slot.)
func TestPermitsGoToWaitersInArrivalOrder(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	d := newDriver(t, dir)
	held := []*driver.Request{permitReq("sem", "a", 2), permitReq("sem", "b", 2)}
	for _, r := range held {
		mustAcquire(t, d, r)
	}
	type served struct {
		i   int
		err error
	}
	grants := make(chan served, 4)
	var reqs []*driver.Request
	var drivers []*Driver
	for i := 0; i < 4; i++ {
		dw := newDriver(t, dir)
		blocked := blockedHook(dw)
		r := permitReq("sem", "waiter"+strconv.Itoa(i), 2)
		reqs, drivers = append(reqs, r), append(drivers, dw)
		go func() {
			_, err := dw.Acquire(ctx, r)
			grants <- served{i, err}
		}()
		waitFor(t, blocked, r.Owner+" to wait")
	}
	// One permit given back at a time (the first holders', then each
	// waiter's once served): each makes one grant, the next waiter's.
	giveBack := []func() error{
		func() error { return d.Release(ctx, held[0]) },
		func() error { return d.Release(ctx, held[1]) },
	}
	for i := range reqs {
		if err := giveBack[i](); err != nil {
			t.Fatal(err)
		}
		got := waitFor(t, grants, "a waiter to take the permit given back")
		if got.err != nil {
			t.Fatalf("%s: %v", reqs[got.i].Owner, got.err)
		}
		if got.i != i {
			t.Fatalf("the permit given back went to %s, want %s, who asked before it", reqs[got.i].Owner, reqs[i].Owner)
		}
		giveBack = append(giveBack, func() error { return drivers[i].Release(ctx, reqs[i]) })
	}
}

// A waiting permit request is served while the holders of every permit give
// them back and ask again at once, in a loop: they queue behind it rather
// than take their slots back before it wakes. Without the queue the waiter
// got nothing for as long as they churned.
func TestPermitWaiterIsServedWhileHoldersChurn(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	d := newDriver(t, dir)
	churners := []*driver.Request{permitReq("sem", "churner0", 2), permitReq("sem", "churner1", 2)}
	for _, r := range churners {
		mustAcquire(t, d, r)
	}
	dw := newDriver(t, dir)
	blocked := blockedHook(dw)
	r := permitReq("sem", "waiter", 2)
	got := goAcquire(ctx, dw, r)
	waitFor(t, blocked, "the waiter to wait")

	stop := make(chan struct{})
	var churned atomic.Int64
	var wg sync.WaitGroup
	for _, c := range churners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := d.Release(ctx, c); err != nil {
					t.Error(err)
					return
				}
				select {
				case <-stop:
					return
				default:
				}
				if _, err := d.Acquire(ctx, c); err != nil {
					t.Error(err)
					return
				}
				churned.Add(1)
			}
		}()
	}
	res := waitFor(t, got, "the waiter to be served while the holders churn")
	close(stop)
	wg.Wait()
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Logf("served after %d grants to the churning holders", churned.Load())
	if err := dw.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
}
