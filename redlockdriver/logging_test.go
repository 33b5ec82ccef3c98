package redlockdriver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/logtest"
	"github.com/distlock/lock/internal/testserver"
)

// One server of three down leaves the Locker working (a majority answers):
// the failed dials to it, logged once at Warn with its address, are then the
// only sign of it on the Locker's logger.
func TestDialFailureToOneServerReachesTheLockersLogger(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	rec := logtest.New()
	lk := lock.New(d, lock.WithLogger(rec.Logger()))
	defer lk.Close()
	if err := servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		l, err := lk.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire with 2 servers of 3 up: %v", err)
		}
		_ = l.Release(ctx)
	}
	failed, ok := rec.Wait(10*time.Second, logtest.Message("dial failed"))
	if !ok {
		t.Fatalf("no dial failure logged; the records:\n%s", rec.All())
	}
	if failed.Level != slog.LevelWarn || failed.Attrs["addr"] != servers[1].Addr() {
		t.Errorf("dial failure logged as %v, want Warn with addr=%s", failed, servers[1].Addr())
	}
	if n := len(rec.Matching(logtest.Message("dial failed"))); n != 1 {
		t.Errorf("%d dial failures logged for one server down, want 1:\n%s", n, rec.All())
	}
}
