package redlockdriver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// handoffDriver is a driver over servers, subscribed to its inbox, whose
// waiters look again on their own the grace after it released their key.
func handoffDriver(t *testing.T, ctx context.Context, servers []*testserver.Server, grace time.Duration) *Driver {
	t.Helper()
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	d.grace = grace
	t.Cleanup(func() { _ = d.Close() })
	// Subscribed on every server before anyone waits: a waiter whose driver
	// is not yet subscribed polls, and could look again at any moment.
	d.subscribe()
	waitUntil(ctx, t, "the driver's inbox subscribed on every server", func() bool {
		d.held.Lock()
		defer d.held.Unlock()
		return d.sub.nup == len(d.servers)
	})
	return d
}

// waitUntil polls ok every millisecond until it holds, failing t when ctx ends.
func waitUntil(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func handoffRequest(owner string) *request {
	return &request{Key: "k", Owner: owner, TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})}
}

// acquireAsync runs Acquire in the background; its outcome arrives on the channel.
func acquireAsync(ctx context.Context, d *Driver, req *request) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := d.Acquire(ctx, req)
		done <- err
	}()
	return done
}

// waitWaiting waits until d has a waiter for the lock key "k" that found the
// lock held and registered d on the servers since since.
func waitWaiting(ctx context.Context, t *testing.T, d *Driver, since time.Time) {
	t.Helper()
	lockKey := d.keys("k").Lock
	waitUntil(ctx, t, "a waiter of the driver registered", func() bool {
		d.held.Lock()
		defer d.held.Unlock()
		g := d.groups[lockKey]
		return g != nil && g.registered.After(since)
	})
}

// When another driver waits, a release passes the lock to that driver's waiter,
// not back to a waiter of the driver that let it go: with two drivers taking
// turns, the holder's driver alternates at every handoff. (Before, both
// drivers' waiters were told and raced, and a driver could win its own lock back.)
func TestReleasePassesTheLockToAnotherDriver(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	passTurns(ctx, t, servers, func(*Driver) {})
}

// A waiter's registration reaches the last servers after its round was
// decided, so a release can find the other driver registered on a majority
// only. The server without it tells the releasing driver, whose own waiter
// must still leave the lock to the other driver, which the majority told.
func TestReleaseFindingTheOtherDriverOnAMajorityOnlyStillPassesTheLock(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	passTurns(ctx, t, servers, func(other *Driver) {
		k := other.keys("k")
		if err := admin[0].HDel(ctx, k.Waiters, other.inbox).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// passTurns has two drivers take turns on one key for 4 rounds, each round with
// a waiter in both drivers, and fails t if a release's own driver takes the
// lock back. beforeRelease runs before each release, given the other driver.
func passTurns(ctx context.Context, t *testing.T, servers []*testserver.Server, beforeRelease func(other *Driver)) {
	t.Helper()
	drivers := []*Driver{handoffDriver(t, ctx, servers, time.Hour), handoffDriver(t, ctx, servers, time.Hour)}

	holder := handoffRequest("holder-0")
	if _, err := drivers[0].Acquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	holderDriver := drivers[0]
	// A waiter of the other driver.
	other := 1
	next := handoffRequest("waiter-1")
	nextDone := acquireAsync(ctx, drivers[other], next)
	waitWaiting(ctx, t, drivers[other], time.Time{})
	for round := 1; round <= 4; round++ {
		// A waiter of the holder's own driver joins; both drivers now wait.
		own := handoffRequest(fmt.Sprintf("own-%d", round))
		start := time.Now()
		ownDone := acquireAsync(ctx, holderDriver, own)
		waitWaiting(ctx, t, holderDriver, start)

		beforeRelease(drivers[other])
		if err := holderDriver.Release(ctx, holder); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-nextDone:
			if err != nil {
				t.Fatalf("round %d: the other driver's waiter: %v", round, err)
			}
		case err := <-ownDone:
			t.Fatalf("round %d: the releasing driver's own waiter took the lock back (err %v) while another driver waited", round, err)
		case <-ctx.Done():
			t.Fatalf("round %d: nobody took the released lock", round)
		}
		// The own waiter keeps waiting; it is next.
		holder, holderDriver = next, drivers[other]
		next, nextDone, other = own, ownDone, 1-other
	}
	if err := holderDriver.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if err := <-nextDone; err != nil {
		t.Fatal(err)
	}
	if err := drivers[other].Release(ctx, next); err != nil {
		t.Fatal(err)
	}
}

// A driver registered as waiting that died (its registration stays until its
// lease ends) is told of a release and never takes the lock: the releasing
// driver's own waiter then looks again after the grace, not after its
// registration's renewal (a third of the 30 s TTL).
func TestWaiterOfADeadDriverDoesNotStallTheOthers(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d := handoffDriver(t, ctx, servers, 20*time.Millisecond)

	holder := handoffRequest("holder")
	if _, err := d.Acquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	// The dead driver's registration, live for an hour by the servers' clock.
	deadline := fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())
	for _, a := range admin {
		if err := a.HSet(ctx, DefaultPrefix+":{k}:waiters", DefaultPrefix+":inbox:dead", deadline).Err(); err != nil {
			t.Fatal(err)
		}
	}
	own := handoffRequest("own")
	ownDone := acquireAsync(ctx, d, own)
	waitWaiting(ctx, t, d, time.Time{})

	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	select {
	case err := <-ownDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-wctx.Done():
		t.Fatal("the own waiter did not take the lock within 5s of its release: it waits for the dead driver")
	}
	if err := d.Release(ctx, own); err != nil {
		t.Fatal(err)
	}
}
