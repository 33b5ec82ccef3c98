package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
	"github.com/distlock/lock/internal/testserver"
)

// serverCalls reads what a server counted since its last CONFIG RESETSTAT:
// every command (those scripts run included) and the EVALSHA calls.
func serverCalls(ctx context.Context, c *redis.Client) (all, evalsha int64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		all += n
		if name == "cmdstat_evalsha" {
			evalsha += n
		}
	}
	return all, evalsha, nil
}

// A batch of 20,000 locks (more than a server's job queue holds, and more
// than a server answers within one per-server timeout) is refreshed on every
// server by one script call per 256 locks, three commands per lock (GET, and
// PEXPIRE of the lock and its grant record), and every lock is confirmed by
// the majority; each lock gets its own answer, with the cause of a loss.
func TestRefreshBatchOfThousandsOfLocksCostsOneScriptCallPer256AndLosesNone(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const n = 20000
	reqs := make([]*driver.Request, n)
	for i := range reqs {
		reqs[i] = &driver.Request{Key: fmt.Sprintf("many/%d", i), Owner: fmt.Sprintf("owner-%d", i), TTL: 30 * time.Second, Lost: func(error) {}}
		if _, err := d.TryAcquire(ctx, reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range d.RefreshBatch(ctx, reqs) { // the first: loads the script
		if err != nil {
			t.Fatalf("first refresh of %s: %v", reqs[i].Key, err)
		}
	}
	// Three locks near their end on every server, which the refresh must
	// extend; the servers count from when the first refresh has ended on
	// every one of them.
	d.settle()
	for _, a := range admin {
		for _, r := range reqs[:3] {
			if err := a.PExpire(ctx, d.keys(r.Key).lock, time.Second).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i, err := range d.RefreshBatch(ctx, reqs) {
		if err != nil {
			t.Fatalf("refresh of %s: %v", reqs[i].Key, err)
		}
	}
	d.settle()
	batches := int64((n + redisproto.RefreshBatch - 1) / redisproto.RefreshBatch)
	for s, a := range admin {
		all, scripts, err := serverCalls(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		all -= 2 // CONFIG RESETSTAT counts itself, and settle's PING
		// The scripts' commands (two a lock: its grant record, written
		// at the acquire to outlive it, is not due), the script calls, an
		// INFO that may confirm the server's run_id.
		if want := 2*n + batches + 1; all > want || scripts != batches {
			t.Errorf("server %d: a refresh of %d locks ran %d commands (%d script calls), want at most %d (%d)", s+1, n, all, scripts, want, batches)
		}
		for _, r := range reqs[:3] {
			if pt, err := a.PTTL(ctx, d.keys(r.Key).lock).Result(); err != nil || pt < r.TTL-time.Since(start) {
				t.Errorf("server %d: after the refresh %s lives %v (%v), want about its TTL %v", s+1, r.Key, pt, err, r.TTL)
			}
		}
	}

	// Losses, each its own cause, in one batch with locks still held: a
	// lock gone from two of three servers, one gone from one only (still
	// held by the majority), one force-released.
	for _, a := range admin[:2] {
		if err := a.Del(ctx, d.keys(reqs[10].Key).lock).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin[0].Del(ctx, d.keys(reqs[11].Key).lock).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ForceRelease(ctx, reqs[12].Key); err != nil {
		t.Fatal(err)
	}
	for i, err := range d.RefreshBatch(ctx, reqs) {
		var want error
		switch i {
		case 10:
			want = driver.ErrExpired
		case 12:
			want = driver.ErrForceReleased
		}
		switch {
		case want == nil && err != nil:
			t.Errorf("lock %d: %v, want held", i, err)
		case want != nil && (!errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, want)):
			t.Errorf("lock %d: %v, want ErrNotHeld and %v", i, err, want)
		}
	}
	for i, r := range reqs {
		if i != 10 && i != 12 {
			if err := d.Release(ctx, r); err != nil {
				t.Errorf("release %s: %v", r.Key, err)
			}
		}
	}
}
