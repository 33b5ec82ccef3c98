package zkdriver_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/internal/waketest"
)

// A waiter's watch that ends without the delete it waits for (its session
// expired on the server) makes it look again on its own, a wake-up it
// reports as the fallback's; the release it then waits for is ZooKeeper's
// notification.
func TestWaiterReportsAnEndedWatchAsTimerAndTheDeleteAsNotification(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holderD, err := openDriver(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer holderD.Close()
	waiterD, err := openDriver(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer waiterD.Close()
	holder := &driver.Request{Key: "k", Owner: "holder", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
	if _, err := holderD.TryAcquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	var wakes waketest.Log
	waiter := &driver.Request{Key: "k", Owner: "waiter", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
	done := make(chan error, 1)
	go func() {
		_, err := waiterD.Acquire(wakes.Context(ctx), waiter)
		done <- err
	}()
	// Each step waits for the waiter's watch of the holder's node, as the
	// server has it: expired or released before the waiter set it, the
	// waiter would find the node gone by reading, with no watch to end.
	id, pw, timeout := waiterD.SessionForTest()
	waitUntil(t, 10*time.Second, "the waiter watching the holder's node", func() bool { return watchedBy(srv.Addr(), "/distlock/k/", id) })
	if err := expireSession(srv.Addr(), id, pw, timeout); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the waiter woken by its ended watch", func() bool { return len(wakes.Wakes()) > 0 })
	waitUntil(t, 30*time.Second, "the waiter queued again, watching in a new session", func() bool {
		now, _, _ := waiterD.SessionForTest()
		return now != id && now != 0 && watchedBy(srv.Addr(), "/distlock/k/", now)
	})
	if err := holderD.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := waiterD.Release(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	w := wakes.Wakes()
	if len(w) < 2 || w[0] != driver.WakeTimer || w[len(w)-1] != driver.WakeNotified {
		t.Errorf("wake-ups %v, want the ended watch's timer first and the delete's notification last", w)
	}
}
