package redisdriver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// A holder that stops refreshing sends no handoff: its lock ends by its TTL on
// the server, and the waiter finds it free by its own timer at the TTL's end,
// a wake-up it reports as the timer's.
func TestWaiterWokenByHolderTTLEndReportsTimer(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d1, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	holder := &driver.Request{Key: "k", Owner: "holder", TTL: 200 * time.Millisecond, Lost: driver.LostFunc(func(error) {})}
	if _, err := d1.TryAcquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		wakes []driver.WakeSource
	)
	waiter := &driver.Request{Key: "k", Owner: "waiter", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	wctx := driver.WithWakeReporter(ctx, func(s driver.WakeSource) { mu.Lock(); wakes = append(wakes, s); mu.Unlock() })
	if _, err := d2.Acquire(wctx, waiter); err != nil {
		t.Fatal(err)
	}
	defer d2.Release(ctx, waiter)
	mu.Lock()
	defer mu.Unlock()
	if len(wakes) == 0 {
		t.Fatal("the waiter reported no wake-up")
	}
	for _, s := range wakes {
		if s != driver.WakeTimer {
			t.Errorf("wake-ups %v, want only the timer's: nothing notified the waiter", wakes)
			break
		}
	}
}
