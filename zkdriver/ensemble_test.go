package zkdriver_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// mode asks a ZooKeeper server for its role with the srvr four-letter word:
// "leader", "follower", "standalone", or "" if it does not answer.
func mode(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return ""
	}
	out, _ := io.ReadAll(c)
	for _, line := range strings.Split(string(out), "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// The ensemble's leader dies while a lock is held and another client waits
// for it. The session outlives the election (sessions move with the quorum),
// so the holder keeps the lock: Lost stays open, the waiter stays waiting until
// the holder releases, and then gets a higher token.
func TestLeaderFailoverKeepsTheLockAndItsExclusion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server ensemble")
	}
	ens := testserver.ZooKeeperEnsemble(t, 3)
	url := ens.URL() + "?session_timeout=10s"
	a, _ := mustOpen(t, url, lock.WithTTL(10*time.Second))
	b, _ := mustOpen(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	l, err := a.Acquire(ctx, "leader-only-job")
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	type result struct {
		l     *lock.Lock
		err   error
		early bool // acquired before the holder released
	}
	waiter := make(chan result, 1)
	go func() {
		l2, err := b.Acquire(ctx, "leader-only-job")
		waiter <- result{l2, err, !released.Load()}
	}()

	var leader int = -1
	for i, m := range ens.Members {
		if mode(m.Addr()) == "leader" {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member says it is the leader")
	}
	if err := ens.Members[leader].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitUntil(t, time.Minute, "a new leader", func() bool {
		for i, m := range ens.Members {
			if i != leader && mode(m.Addr()) == "leader" {
				return true
			}
		}
		return false
	})
	t.Logf("new leader elected %v after the kill", time.Since(killed))
	// The holder's session survived: a refresh through the new quorum confirms
	// it (once the client has found a server of it).
	refreshOnceReconnected(t, l, time.Minute)
	t.Logf("lock confirmed %v after the kill", time.Since(killed))
	// Let automatic refresh run through the new quorum for a while too.
	select {
	case <-l.Lost():
		t.Fatal("Lost closed after a leader failover the session survived")
	case r := <-waiter:
		t.Fatalf("the waiter acquired (%v) while the holder still held the lock", r.err)
	case <-time.After(3 * time.Second):
	}
	released.Store(true)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after the failover: %v", err)
	}
	r := <-waiter
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.early {
		t.Error("the waiter acquired before the holder released")
	}
	if r.l.Token() <= l.Token() {
		t.Errorf("waiter's token %d not above the holder's %d", r.l.Token(), l.Token())
	}
	_ = r.l.Release(ctx)
}
