//go:build linux

package filedriver

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
)

// promptWake bounds how long a blocked waiter may take to get a released lock. It
// is half the fallback recheck, so passing it shows the waiter was woken by an
// inotify event, not by its safety-net timer.
const promptWake = fallbackRecheck / 2

type acquireResult struct {
	g   driver.Grant
	err error
	at  time.Time
}

func goAcquire(ctx context.Context, d *Driver, r *driver.Request) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		g, err := d.Acquire(ctx, r)
		ch <- acquireResult{g, err, time.Now()}
	}()
	return ch
}

func TestBlockedAcquireWakesPromptlyOnRelease(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	holder := newReq("k", "holder")
	first := mustAcquire(t, d1, holder)
	got := goAcquire(testCtx(t), d2, newReq("k", "waiter"))
	waitFor(t, blocked, "the waiter to block")

	released := time.Now()
	if err := d1.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	res := waitFor(t, got, "the waiter to acquire")
	if res.err != nil {
		t.Fatal(res.err)
	}
	if lat := res.at.Sub(released); lat > promptWake {
		t.Fatalf("waiter took %v after the release, want under %v", lat, promptWake)
	} else {
		t.Logf("wake-up latency %v", lat)
	}
	if res.g.Token <= first {
		t.Fatalf("token %d after %d", res.g.Token, first)
	}
}

func TestCancelledAcquireLeavesNoDescriptorOrWatch(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	mustAcquire(t, d1, newReq("k", "holder"))
	// Start d2's inotify reader first, so it does not count as left behind (an
	// Acquire that takes its key at once does not start it).
	if d2.watcher() == nil {
		t.Fatal("no inotify watcher")
	}
	before := openFDs(t)

	ctx, cancel := context.WithCancel(context.Background())
	got := goAcquire(ctx, d2, newReq("k", "waiter"))
	waitFor(t, blocked, "the waiter to block")
	if n := d2.notify.w.watches(); n != 1 {
		t.Fatalf("%d watches while waiting, want 1", n)
	}
	cancel()
	res := waitFor(t, got, "the cancelled Acquire to return")
	if !errors.Is(res.err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", res.err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after the cancelled Acquire, %d before", after, before)
	}
	if n := d2.notify.w.watches(); n != 0 {
		t.Fatalf("%d watches left behind", n)
	}
}

func TestCloseEndsWaitingAcquire(t *testing.T) {
	dir := t.TempDir()
	d1 := newDriver(t, dir)
	d2, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	blocked := blockedHook(d2)
	mustAcquire(t, d1, newReq("k", "holder"))
	got := goAcquire(testCtx(t), d2, newReq("k", "waiter"))
	waitFor(t, blocked, "the waiter to block")
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	if res := waitFor(t, got, "Acquire to return"); !errors.Is(res.err, driver.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", res.err)
	}
}

func TestWaiterTakesLockFileThatReplacedTheHeldOne(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	mustAcquire(t, d1, newReq("k", "holder"))
	got := goAcquire(testCtx(t), d2, newReq("k", "waiter"))
	waitFor(t, blocked, "the waiter to block")
	deleted := time.Now()
	if err := os.Remove(d1.path("k")); err != nil {
		t.Fatal(err)
	}
	res := waitFor(t, got, "the waiter to acquire")
	if res.err != nil {
		t.Fatal(res.err)
	}
	if lat := res.at.Sub(deleted); lat > promptWake {
		t.Fatalf("waiter took %v to notice the deletion", lat)
	}
}

func TestWaitersOnOneKeyShareOneWatchPerFileAndAllGetTheLock(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	holder := newReq("k", "holder")
	mustAcquire(t, d1, holder)
	reqs := []*driver.Request{newReq("k", "w1"), newReq("k", "w2"), newReq("k", "w3")}
	results := make(chan *driver.Request, len(reqs))
	for _, r := range reqs {
		r := r // go 1.21 loop variable semantics
		go func() {
			if _, err := d2.Acquire(testCtx(t), r); err != nil {
				t.Error(err)
			}
			results <- r
		}()
		waitFor(t, blocked, "a waiter to block")
	}
	// The first waiter holds the intent file and watches the lock file; the
	// others wait for the intent file: one watch per file, whatever the number
	// of waiters.
	if n := d2.notify.w.watches(); n != 2 {
		t.Fatalf("%d watches for one key's lock and intent files, want 2", n)
	}
	if err := d1.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	for range reqs {
		r := waitFor(t, results, "the next waiter to acquire")
		if err := d2.Release(testCtx(t), r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWaiterOnOneKeyDoesNotBlockAnother(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	mustAcquire(t, d1, newReq("a", "holder"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := goAcquire(ctx, d2, newReq("a", "waiter"))
	waitFor(t, blocked, "the waiter to block")
	if _, err := d2.Acquire(testCtx(t), newReq("b", "other")); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitFor(t, waiting, "the waiter to give up")
}
