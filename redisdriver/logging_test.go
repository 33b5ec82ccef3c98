package redisdriver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/logtest"
	"github.com/distlock/lock/internal/testserver"
)

// go-redis's failed dials reach the Locker's logger: once at Warn, with the
// server's address, while the server is down (not once per attempt), and
// once at Info when a dial succeeds again.
func TestGoRedisDialFailureReachesTheLockersLogger(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := logtest.New()
	d, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, lock.WithLogger(rec.Logger()))
	defer lk.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for range 3 { // each attempt dials again
		_, _ = lk.TryAcquire(ctx, "k")
	}
	failed, ok := rec.Wait(10*time.Second, logtest.Message("dial failed"))
	if !ok {
		t.Fatalf("no dial failure logged; the records:\n%s", rec.All())
	}
	if failed.Level != slog.LevelWarn || failed.Attrs["client"] != "go-redis" || failed.Attrs["addr"] != srv.Addr() || failed.Attrs["error"] == "" {
		t.Errorf("dial failure logged as %v, want Warn with client=go-redis, addr=%s and the error", failed, srv.Addr())
	}
	if n := len(rec.Matching(logtest.Message("dial failed"))); n != 1 {
		t.Errorf("%d dial failures logged for one outage, want 1:\n%s", n, rec.All())
	}
	if err := srv.Restart(false); err != nil {
		t.Fatal(err)
	}
	l, err := lk.Acquire(ctx, "k") // retries until go-redis dials again
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	back, ok := rec.Wait(10*time.Second, logtest.Message("dial succeeded again"))
	if !ok || back.Level != slog.LevelInfo || back.Attrs["addr"] != srv.Addr() {
		t.Errorf("the dial after the restart logged as %v (found: %v), want Info with addr=%s", back, ok, srv.Addr())
	}
}

// A restart of the server that held several locks is logged once at Warn as
// a change of the server's identity, not once per lock; a second restart,
// which takes a lock granted after the first, is logged again.
func TestServerRestartLogsIdentityChangeOncePerChange(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := logtest.New()
	lk, _ := subscribedLocker(t, ctx, srv.URL(), lock.WithTTL(30*time.Second), lock.WithLogger(rec.Logger()))
	changed := logtest.Message("distlock: backend server identity changed")
	restart := func(keys ...string) {
		t.Helper()
		var held []*lock.Lock
		for _, k := range keys {
			l, err := lk.Acquire(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		if err := srv.Restart(true); err != nil {
			t.Fatal(err)
		}
		for _, l := range held {
			select {
			case <-l.Lost():
			case <-ctx.Done():
				t.Fatalf("%s not lost after the restart", l.Key())
			}
		}
	}
	restart("a", "b", "c")
	got := rec.Matching(changed)
	if len(got) != 1 {
		t.Fatalf("%d identity changes logged for one restart with 3 locks, want 1:\n%s", len(got), rec.All())
	}
	if got[0].Level != slog.LevelWarn || got[0].Attrs["backend"] == "" || got[0].Attrs["error"] == "" {
		t.Errorf("identity change logged as %v, want Warn with backend and error", got[0])
	}
	if n := len(rec.Matching(logtest.Message("distlock: lock lost"))); n != 3 {
		t.Errorf("%d losses logged, want 3", n)
	}
	restart("d")
	if n := len(rec.Matching(changed)); n != 2 {
		t.Errorf("%d identity changes logged after two restarts, want 2:\n%s", n, rec.All())
	}
}
