package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// A lock is held while a majority holds it: losing it on one server of three
// (deleted, or the server restarted empty) changes nothing, losing it on two
// ends it at the next refresh, which reports the loss at once and gives back
// what is left of it.
func TestRefreshNeedsAMajority(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	lk, err := lock.Open(ctx, redlockURL(servers), lock.WithTTL(10*time.Second), lock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	key := DefaultPrefix + ":{k}"
	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with the lock on 2 of 3 servers: %v", err)
	}
	if err := admin[1].Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx); !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Refresh with the lock on 1 of 3 servers = %v, want ErrNotHeld and ErrLost", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost() still open after a refresh found no majority")
	}
	if keys := residue(ctx, t, admin, DefaultPrefix); len(keys) > 0 {
		t.Fatalf("the lost lock's remains were not given back: %v", keys)
	}
}

// Waiting costs no goroutine per server: many Acquire calls waiting on
// different keys add one goroutine each (the caller's) and, once, one inbox
// reader per server.
func TestWaitingNeedsNoGoroutinePerServer(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	holder, err := lock.Open(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := lock.Open(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	const n = 40
	for i := 0; i < n; i++ {
		if _, err := holder.Acquire(ctx, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	base := runtime.NumGoroutine()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := waiter.Acquire(wctx, fmt.Sprint("k", i))
			done <- err
		}()
	}
	// Every waiter has made at least one round once each key shows the
	// waiting registration on every server.
	admin := admins(t, servers)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < n; i++ {
		for _, a := range admin {
			for a.Exists(ctx, fmt.Sprintf("%s:{k%d}:waiters", DefaultPrefix, i)).Val() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("waiter %d never registered", i)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	grown := runtime.NumGoroutine() - base
	cancel()
	for i := 0; i < n; i++ {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("waiter: %v, want context.Canceled", err)
		}
	}
	if limit := n + len(servers) + 5; grown > limit {
		t.Fatalf("%d waiting Acquire calls over %d servers added %d goroutines, want at most %d (one per call, one reader per server)", n, len(servers), grown, limit)
	}
	t.Logf("%d waiting calls added %d goroutines", n, grown)
}
