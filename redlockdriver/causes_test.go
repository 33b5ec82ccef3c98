package redlockdriver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// A lock whose key holds another owner's value on a majority of the servers
// (overwritten by a client of the plain SET pattern) is reported, as the
// package documents, as gone from too many servers: ErrExpired. Redlock has no
// ErrTakenOver: one server's value says nothing about the majority. The
// holder's Release leaves the other values alone.
func TestRefreshFindingAnotherOwnerOnAMajorityReportsExpired(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	// Refreshed by hand: the check comes after the overwrite, never during it.
	lk := lock.New(d, lock.WithTTL(10*time.Second), lock.WithAutoRefresh(false))
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	d.settle() // the grant's last servers have answered
	key := d.keys("k").Lock
	for _, a := range admin[:2] {
		if err := a.Set(ctx, key, "standard-client", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Refresh(ctx); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrExpired) {
		t.Errorf("Refresh = %v, want ErrLost and ErrExpired", err)
	}
	if err := l.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrExpired) {
		t.Errorf("Err = %v, want ErrLost and ErrExpired", err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release = %v, want ErrLost", err)
	}
	for i, a := range admin[:2] {
		if v, err := a.Get(ctx, key).Result(); err != nil || v != "standard-client" {
			t.Errorf("server %d after the holder let go: %q, %v; want the other owner's value", i, v, err)
		}
	}
}
