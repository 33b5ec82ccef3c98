package pgadvisory_test

import (
	"context"
	"sync"
	"testing"

	"github.com/distlock/lock/driver"
)

// wakeLog records the wake-ups the driver reports for the Acquire calls made
// with its context (a Locker without metrics passes the context through).
type wakeLog struct {
	mu    sync.Mutex
	wakes []driver.WakeSource
}

func (w *wakeLog) ctx(ctx context.Context) context.Context {
	return driver.WithWakeReporter(ctx, func(s driver.WakeSource) {
		w.mu.Lock()
		w.wakes = append(w.wakes, s)
		w.mu.Unlock()
	})
}

// only fails t unless at least one wake-up was reported, each of them want.
func (w *wakeLog) only(t *testing.T, want driver.WakeSource, why string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.wakes) == 0 {
		t.Errorf("no wake-up reported, want %v: %s", want, why)
	}
	for _, s := range w.wakes {
		if s != want {
			t.Errorf("wake-ups %v, want only %v: %s", w.wakes, want, why)
			return
		}
	}
}
