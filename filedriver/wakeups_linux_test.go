package filedriver

import (
	"errors"
	"sync"
	"testing"

	"github.com/distlock/lock/driver"
)

// wakeLog records the wake-ups a request reports.
type wakeLog struct {
	mu    sync.Mutex
	wakes []driver.WakeSource
}

func (w *wakeLog) record(s driver.WakeSource) {
	w.mu.Lock()
	w.wakes = append(w.wakes, s)
	w.mu.Unlock()
}

func (w *wakeLog) get() []driver.WakeSource {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]driver.WakeSource(nil), w.wakes...)
}

// A release wakes a watched waiter by inotify's close event, reported as a
// notification and nothing else when the waiter blocked once.
func TestWatchedWaiterReportsTheCloseEventAsNotification(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	holder := newReq("k", "holder")
	mustAcquire(t, d1, holder)
	var log wakeLog
	waiter := newReq("k", "waiter")
	got := make(chan error, 1)
	go func() { _, err := d2.Acquire(driver.WithWakeReporter(testCtx(t), log.record), waiter); got <- err }()
	waitFor(t, blocked, "the waiter to block")
	if err := d1.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, got, "the waiter's grant"); err != nil {
		t.Fatal(err)
	}
	defer d2.Release(testCtx(t), waiter)
	if w := log.get(); len(w) == 0 || w[0] != driver.WakeNotified {
		t.Errorf("wake-ups %v, want the close event's notification first", w)
	}
}

// A waiter without a watch (inotify unavailable: its limits reached) polls,
// and each of its wake-ups is the timer's.
func TestUnwatchedWaiterReportsItsPollsAsTimer(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	d2.mu.Lock()
	d2.notify.err = errors.New("inotify unavailable (test)") // as newWatcher fails at the limit
	d2.mu.Unlock()
	blocked := blockedHook(d2)
	holder := newReq("k", "holder")
	mustAcquire(t, d1, holder)
	var log wakeLog
	waiter := newReq("k", "waiter")
	got := make(chan error, 1)
	go func() { _, err := d2.Acquire(driver.WithWakeReporter(testCtx(t), log.record), waiter); got <- err }()
	waitFor(t, blocked, "the waiter to block")
	if err := d1.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, got, "the waiter's grant"); err != nil {
		t.Fatal(err)
	}
	defer d2.Release(testCtx(t), waiter)
	w := log.get()
	if len(w) == 0 {
		t.Fatal("the polling waiter reported no wake-up")
	}
	for _, s := range w {
		if s != driver.WakeTimer {
			t.Fatalf("wake-ups %v, want only the timer's: nothing can notify an unwatched waiter", w)
		}
	}
}
