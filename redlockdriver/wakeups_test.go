package redlockdriver

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/internal/waketest"
)

// A holder that stops refreshing sends no release announcement: its lock ends
// by its TTL on the servers, and the waiter finds it free by its own timer at
// the TTL's end, a wake-up it reports as the timer's.
func TestWaiterWokenByHolderTTLEndReportsTimer(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	u := redlockURL(servers, "server_timeout=300ms")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d1, err := openURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := openURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	// Each server's timeout is a tenth of the TTL at most (20 ms at a
	// 200 ms TTL), which a loaded machine exceeds: this property is about
	// the wake-up, so the TTL and timeout leave room for load.
	waketest.CheckHolderTTLEndWakesByTimer(t, ctx, d1, d2, "k", 3*time.Second)
}

// A waiter registered on the servers is woken by their release announcement,
// a wake-up it reports as a notification.
func TestWaiterWokenByReleaseAnnouncementReportsNotification(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	d1, d2 := handoffDriver(t, ctx, servers, time.Hour), handoffDriver(t, ctx, servers, time.Hour)
	holder := handoffRequest("holder")
	if _, err := d1.Acquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	var wakes waketest.Log
	waiter := handoffRequest("waiter")
	done := acquireAsync(wakes.Context(ctx), d2, waiter)
	waitWaiting(ctx, t, d2, time.Time{})
	if err := d1.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := d2.Release(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	if w := wakes.Wakes(); len(w) != 1 || w[0] != driver.WakeNotified {
		t.Errorf("wake-ups %v, want one notification: the waiter sleeps until its registration's renewal otherwise", w)
	}
}
