package redlockdriver

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// A user whose ACL refuses INFO (which tells a server's run_id) still opens
// and locks: its servers' locks are checked by key alone, and INFO, refused
// once at Open, is not asked again.
func TestACLWithoutInfoLocksAndStopsAskingForTheRunID(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	u := userURL(ctx, t, servers, admin, func(int) []any { return []any{"~*", "&*", "+@all", "-info"} })
	lk, err := lock.Open(ctx, u, lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("Open as a user without INFO: %v", err)
	}
	defer lk.Close()
	for _, a := range admin {
		if err := a.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		l, err := lk.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Refresh(ctx); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	for i, a := range admin {
		stats, err := a.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(stats, "\n") {
			if strings.HasPrefix(line, "cmdstat_info:") && !strings.Contains(line, "rejected_calls=0,") {
				t.Errorf("server %d: INFO refused again after Open: %s", i+1, strings.TrimSpace(line))
			}
		}
	}
}
