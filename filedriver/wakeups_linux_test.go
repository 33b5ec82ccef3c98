package filedriver

import (
	"errors"
	"testing"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/waketest"
)

// A release wakes a watched waiter by inotify's close event, reported as a
// notification and nothing else when the waiter blocked once.
func TestWatchedWaiterReportsTheCloseEventAsNotification(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	if w := handOffWakes(t, d1, d2).Wakes(); len(w) == 0 || w[0] != driver.WakeNotified {
		t.Errorf("wake-ups %v, want the close event's notification first", w)
	}
}

// A waiter without a watch (inotify unavailable: its limits reached) polls,
// and each of its wake-ups is the timer's.
func TestUnwatchedWaiterReportsItsPollsAsTimer(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	d2.held.Lock()
	d2.notify.err = errors.New("inotify unavailable (test)") // as newWatcher fails at the limit
	d2.held.Unlock()
	handOffWakes(t, d1, d2).Only(t, driver.WakeTimer, "nothing can notify an unwatched waiter")
}

// handOffWakes hands key "k" from a holder on d1 to a waiter on d2 that
// blocked before the release, and returns the wake-ups the waiter reported.
// The waiter's lock is released when t ends.
func handOffWakes(t *testing.T, d1, d2 *Driver) *waketest.Log {
	t.Helper()
	blocked := blockedHook(d2)
	holder := newReq("k", "holder")
	mustAcquire(t, d1, holder)
	var log waketest.Log
	waiter := newReq("k", "waiter")
	got := make(chan error, 1)
	go func() { _, err := d2.Acquire(log.Context(testCtx(t)), waiter); got <- err }()
	waitFor(t, blocked, "the waiter to block")
	if err := d1.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, got, "the waiter's grant"); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t) // its cancel, registered first, runs after the release
	t.Cleanup(func() { _ = d2.Release(ctx, waiter) })
	return &log
}
