package memdriver_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/waketest"
	"github.com/distlock/lock/memdriver"
)

// A waiter is woken by a release as a notification, and by the end of a
// holder's lease (nothing tells it; its timer does) as the timer.
func TestWaiterReportsReleaseAsNotificationAndLeaseEndAsTimer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d1, d2 := memdriver.New(t.Name()), memdriver.New(t.Name())
	defer d1.Close()
	defer d2.Close()
	for _, c := range []struct {
		name string
		end  func(holder *driver.Request) error // ends the hold once the waiter is queued
		want driver.WakeSource
	}{
		{"release", func(h *driver.Request) error { return d1.Release(ctx, h) }, driver.WakeNotified},
		{"lease end", func(*driver.Request) error { return nil }, driver.WakeTimer},
	} {
		key := c.name
		holder := &driver.Request{Key: key, Owner: "holder", TTL: 200 * time.Millisecond, Lost: driver.LostFunc(func(error) {})}
		if c.want == driver.WakeNotified {
			holder.TTL = time.Hour
		}
		if _, err := d1.TryAcquire(ctx, holder); err != nil {
			t.Fatal(err)
		}
		var wakes waketest.Log
		waiter := &driver.Request{Key: key, Owner: "waiter", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
		got := make(chan error, 1)
		go func() { _, err := d2.Acquire(wakes.Context(ctx), waiter); got <- err }()
		for {
			in, err := d1.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if in.Waiters == 1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the waiter never queued")
			}
			time.Sleep(time.Millisecond)
		}
		if err := c.end(holder); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if err := d2.Release(ctx, waiter); err != nil {
			t.Fatal(err)
		}
		if w := wakes.Wakes(); len(w) != 1 || w[0] != c.want {
			t.Errorf("%s: wake-ups %v, want one, %v", c.name, w, c.want)
		}
	}
}
