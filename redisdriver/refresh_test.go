package redisdriver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto/redistest"
	"github.com/distlock/lock/internal/testserver"
)

// holdMany takes n locks on d, keys "many/0"... with TTL ttl.
func holdMany(t *testing.T, ctx context.Context, d *Driver, n int, ttl time.Duration) []*driver.Request {
	t.Helper()
	reqs := make([]*driver.Request, n)
	for i := range reqs {
		reqs[i] = &driver.Request{Key: fmt.Sprintf("many/%d", i), Owner: randomHex(8), TTL: ttl, Label: "l", Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return reqs
}

// A batch of 1,000 locks costs the server one command per lock (GETEX, in one
// script call per 256 locks), once each lock's fence record was extended by
// its first refresh; each lock gets its own answer, with the cause of a loss:
// expired, taken over, force-released.
func TestRefreshBatchCostsOneCommandPerLockAndAnswersEachLock(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, srv.URL())
	d, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const n = 1000
	reqs := holdMany(t, ctx, d, n, 30*time.Second)
	for i, err := range d.RefreshBatch(ctx, reqs) { // the first: extends the fence records too
		if err != nil {
			t.Fatalf("first refresh of %s: %v", reqs[i].Key, err)
		}
	}
	// Three locks near their end, which the refresh must extend.
	for _, r := range reqs[:3] {
		if err := admin.PExpire(ctx, d.keys(r.Key).Lock, time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i, err := range d.RefreshBatch(ctx, reqs) {
		if err != nil {
			t.Fatalf("refresh of %s: %v", reqs[i].Key, err)
		}
	}
	all, scripts, err := serverCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	all-- // CONFIG RESETSTAT counts itself
	// The scripts' GETEX per lock, the script calls, the INFO that checks
	// the server's run_id.
	batches := int64((n + refreshBatchSize - 1) / refreshBatchSize)
	if want := n + batches + 1; all > want || scripts != batches {
		t.Errorf("a refresh of %d locks ran %d commands (%d script calls) on the server, want at most %d (%d)", n, all, scripts, want, batches)
	}
	// Each lock lives its TTL from the refresh's send time at least.
	for _, r := range reqs[:3] {
		if pt, err := admin.PTTL(ctx, d.keys(r.Key).Lock).Result(); err != nil || pt < r.TTL-time.Since(start) {
			t.Errorf("after the refresh %s lives %v (%v), want about its TTL %v", r.Key, pt, err, r.TTL)
		}
	}

	// Losses, each its own cause, in one batch with locks still held.
	k := func(i int) keys { return d.keys(reqs[i].Key) }
	if err := admin.Del(ctx, k(10).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, k(11).Lock, "someone else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ForceRelease(ctx, reqs[12].Key); err != nil {
		t.Fatal(err)
	}
	redistest.CheckRefreshAnswers(t, d.RefreshBatch(ctx, reqs), map[int]error{10: driver.ErrExpired, 11: driver.ErrTakenOver, 12: driver.ErrForceReleased})
	for _, r := range reqs {
		_ = d.Release(ctx, r)
	}
}

// The fence record (the holder's record) is extended by a lock's first
// refresh, whatever expiry it had, and after that only when the lock nears
// it: a refresh costs no command for it.
func TestFenceRecordIsExtendedAtTheFirstRefreshThenOnlyWhenDue(t *testing.T) {
	d, admin, ctx := newInspectDriver(t)
	req := &driver.Request{Key: "fence", Owner: randomHex(8), TTL: 5 * time.Second, Label: "l"}
	k := d.keys(req.Key)
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	defer d.Release(ctx, req)
	short := func() {
		t.Helper()
		if err := admin.PExpire(ctx, k.Fence, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fenceTTL := func() time.Duration {
		t.Helper()
		pt, err := admin.PTTL(ctx, k.Fence).Result()
		if err != nil {
			t.Fatal(err)
		}
		return pt
	}
	short() // as a record made by an earlier grant, about to expire
	if err := d.Refresh(ctx, req); err != nil {
		t.Fatal(err)
	}
	if pt := fenceTTL(); pt < fenceKeep {
		t.Errorf("after the first refresh the fence record lives %v, want at least %v", pt, fenceKeep)
	}
	short()
	if err := d.Refresh(ctx, req); err != nil {
		t.Fatal(err)
	}
	if pt := fenceTTL(); pt > time.Minute {
		t.Errorf("a second refresh extended the fence record to %v: it costs a command per refresh", pt)
	}
	// A refresh to a TTL that would outlive the record extends it.
	req.TTL = fenceKeep
	if err := d.Refresh(ctx, req); err != nil {
		t.Fatal(err)
	}
	if lock, pt := admin.PTTL(ctx, k.Lock).Val(), fenceTTL(); pt < lock {
		t.Errorf("after a refresh to %v the fence record lives %v, less than the lock's %v", req.TTL, pt, lock)
	}
}
