package telemetrytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	_ "github.com/distlock/lock/redisdriver"
)

// The scripted scenario on Redis, with real faults: lost by expiry (the server
// frozen with SIGSTOP past the validity deadline, so the automatic refresh
// times out), by takeover (another owner overwrites the lock key, and the next
// refresh finds it) and by an operator's ForceRelease (found by the next
// refresh).
func TestScenarioOnRedisEmitsEachMetricSpanAndLogWithTheRightValues(t *testing.T) {
	srv := testserver.StartRedis(t)
	r := newRigAt(t, srv.URL(), "redis", lock.WithTTL(time.Minute)) // no automatic refresh but the one the freeze stops
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })

	scriptedScenario(t, r, []loss{
		{
			cause: "expired", err: lock.ErrExpired,
			lose: func(t *testing.T, r *rig, key string) *lock.Lock {
				l, err := r.lk.Acquire(context.Background(), key, lock.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.Pause(); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := srv.Resume(); err != nil {
						t.Fatal(err)
					}
				}()
				lost(t, l)
				return l
			},
			// The one automatic refresh (a third of the TTL in) hangs on the
			// frozen server until the validity deadline ends it.
			refreshes:       1,
			refreshFailures: map[string]int64{"unavailable": 1},
			backendErrors:   map[string]int64{"unavailable": 1},
			refreshEvents:   [2]int{0, 1},
			// The next backend call (the next loss's Acquire) gets through.
			logs: []string{"WARN distlock: backend unreachable", "INFO distlock: backend recovered"},
		},
		{
			cause: "taken_over", err: lock.ErrTakenOver,
			lose: func(t *testing.T, r *rig, key string) *lock.Lock {
				ctx := context.Background()
				l, err := r.lk.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				// Another owner writes the key, as a client of the plain SET NX
				// pattern would after the lock had expired unseen.
				if err := admin.Set(ctx, "distlock:{"+key+"}", "intruder", redis.KeepTTL).Err(); err != nil {
					t.Fatal(err)
				}
				if err := l.Refresh(ctx); !errors.Is(err, lock.ErrTakenOver) {
					t.Fatalf("Refresh of a taken-over lock: %v, want ErrTakenOver", err)
				}
				lost(t, l)
				return l
			},
			refreshes:       1,
			refreshFailures: map[string]int64{"not_held": 1},
			refreshEvents:   [2]int{1, 1},
		},
		{
			cause: "force_released", err: lock.ErrForceReleased, lose: loseByForceRelease(true),
			refreshes:       1,
			refreshFailures: map[string]int64{"not_held": 1},
			refreshEvents:   [2]int{1, 1},
		},
	})
}
