package redisdriver

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/internal/waketest"
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
	holder := &driver.Request{Key: "k", Owner: "holder", TTL: 200 * time.Millisecond, Lost: func(error) {}}
	if _, err := d1.TryAcquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	var wakes waketest.Log
	waiter := &driver.Request{Key: "k", Owner: "waiter", TTL: time.Second, Lost: func(error) {}}
	if _, err := d2.Acquire(wakes.Context(ctx), waiter); err != nil {
		t.Fatal(err)
	}
	defer d2.Release(ctx, waiter)
	wakes.Only(t, driver.WakeTimer, "nothing notified the waiter")
}
