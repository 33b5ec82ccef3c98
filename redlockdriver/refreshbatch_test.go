package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto/redistest"
	"github.com/distlock/lock/internal/testserver"
)

// A batch of 20,000 locks of two TTLs (more than a server's job queue holds,
// and more than a server answers within one per-server timeout) is refreshed
// on every server by one command per lock (GETEX, no script), each lock to its
// own TTL, except the one whose grant record is due, which goes in a script
// call that also extends the record; every lock is confirmed by the majority;
// each lock gets its own answer, with the cause of a loss.
func TestRefreshBatchOfThousandsOfLocksCostsOneCommandPerLockAndLosesNone(t *testing.T) {
	ctx, d, admin := batchDriver(t)
	const n = 20000
	reqs := make([]*driver.Request, n)
	for i := range reqs {
		ttl := 30 * time.Second // and 40s every other lock: a call carries one TTL
		if i%2 == 1 {
			ttl = 40 * time.Second
		}
		reqs[i] = &driver.Request{Key: fmt.Sprintf("many/%d", i), Owner: fmt.Sprintf("owner-%d", i), TTL: ttl, Lost: driver.LostFunc(func(error) {})}
		if err := tryAcquireThroughStalls(ctx, d, reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Three locks near their end on every server, which the refresh must
	// extend, one of them with its grant record due; the servers count
	// from when the acquires have ended on every one of them.
	d.settle()
	d.held.Lock()
	h := d.held.GetLocked(reqs[1])
	h.recordUntil = recordSecs(d.since() + reqs[1].TTL)
	_ = d.held.PutLocked(reqs[1], h)
	d.held.Unlock()
	for _, a := range admin {
		for _, r := range reqs[:3] {
			if err := a.PExpire(ctx, d.keys(r.Key).Lock, time.Second).Err(); err != nil {
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
	for s, a := range admin {
		all, scripts, err := redistest.ServerCalls(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		all -= 2 // CONFIG RESETSTAT counts itself, and settle's PING
		// A GETEX a lock, the script call of the lock whose record is due
		// and its PEXPIRE of the record (or, where the script was not
		// cached, a NOSCRIPT refusal and the EVAL), an INFO that may
		// confirm the server's run_id.
		if want := int64(n + 3 + 1); all > want || scripts != 1 {
			t.Errorf("server %d: a refresh of %d locks ran %d commands (%d script calls), want at most %d (1)", s+1, n, all, scripts, want)
		}
		for _, r := range reqs[:3] {
			if pt, err := a.PTTL(ctx, d.keys(r.Key).Lock).Result(); err != nil || pt < r.TTL-time.Since(start) || pt > r.TTL {
				t.Errorf("server %d: after the refresh %s lives %v (%v), want its TTL %v less the time since", s+1, r.Key, pt, err, r.TTL)
			}
		}
		if pt := a.PTTL(ctx, d.keys(reqs[1].Key).Grant).Val(); pt < recordTTL(reqs[1].TTL)-time.Since(start) {
			t.Errorf("server %d: the due grant record lives %v after the refresh, want about %v", s+1, pt, recordTTL(reqs[1].TTL))
		}
	}

	// The lock whose record was just extended is no longer due: one
	// command a lock, no script.
	for _, a := range admin {
		if err := a.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range d.RefreshBatch(ctx, reqs) {
		if err != nil {
			t.Fatalf("second refresh of %s: %v", reqs[i].Key, err)
		}
	}
	d.settle()
	for s, a := range admin {
		all, scripts, err := redistest.ServerCalls(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if all -= 2; all > n+1 || scripts != 0 {
			t.Errorf("server %d: a refresh with no record due ran %d commands (%d script calls), want at most %d (0)", s+1, all, scripts, n+1)
		}
	}

	// Losses, each its own cause, in one batch with locks still held: a
	// lock gone from two of three servers, one gone from one only (still
	// held by the majority), one force-released.
	for _, a := range admin[:2] {
		if err := a.Del(ctx, d.keys(reqs[10].Key).Lock).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin[0].Del(ctx, d.keys(reqs[11].Key).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ForceRelease(ctx, reqs[12].Key); err != nil {
		t.Fatal(err)
	}
	// Two more gone from two servers, where the key now holds another
	// owner, or a value that is not a string.
	for _, a := range admin[:2] {
		if err := a.Set(ctx, d.keys(reqs[13].Key).Lock, "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		k := d.keys(reqs[14].Key).Lock
		if err := a.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
		if err := a.HSet(ctx, k, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
	}
	lost := map[int]error{10: driver.ErrExpired, 12: driver.ErrForceReleased, 13: driver.ErrExpired, 14: driver.ErrExpired}
	redistest.CheckRefreshAnswers(t, d.RefreshBatch(ctx, reqs), lost)
	for _, a := range admin[:2] {
		if err := a.Del(ctx, d.keys(reqs[13].Key).Lock, d.keys(reqs[14].Key).Lock).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range reqs {
		if _, gone := lost[i]; !gone {
			if err := d.Release(ctx, r); err != nil {
				t.Errorf("release %s: %v", r.Key, err)
			}
		}
	}
}

// A refresh leaves the grant record alone while it outlives the lock by more
// than half of recordKeep, and extends it (to recordTTL) once it is due; the
// record never ends before the lock.
func TestGrantRecordIsExtendedOnlyWhenDue(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := &driver.Request{Key: "due", Owner: "owner-1", TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Release(ctx, req) }()
	d.settle()
	k := d.keys(req.Key)
	// A record shortened by hand (still longer than the lock) shows whether
	// a refresh touched it.
	short := 2 * req.TTL
	for _, a := range admin {
		if err := a.PExpire(ctx, k.Grant, short).Err(); err != nil {
			t.Fatal(err)
		}
	}
	refresh := func() {
		t.Helper()
		if err := d.RefreshBatch(ctx, []*driver.Request{req})[0]; err != nil {
			t.Fatal(err)
		}
		d.settle()
	}
	refresh()
	for i, a := range admin {
		if pt := a.PTTL(ctx, k.Grant).Val(); pt > short {
			t.Errorf("server %d: a refresh that was not due extended the record to %v", i+1, pt)
		}
	}
	// The record's expiry as the driver knows it, moved to where the next
	// refresh finds it due.
	d.held.Lock()
	h := d.held.GetLocked(req)
	h.recordUntil = recordSecs(d.since() + req.TTL)
	_ = d.held.PutLocked(req, h)
	d.held.Unlock()
	sent := time.Now()
	refresh()
	for i, a := range admin {
		lockTTL := a.PTTL(ctx, k.Lock).Val()
		pt := a.PTTL(ctx, k.Grant).Val()
		if pt <= short || pt > recordTTL(req.TTL) || pt < lockTTL {
			t.Errorf("server %d: after a due refresh the record lives %v, want more than %v, at least the lock's %v, at most %v", i+1, pt, short, lockTTL, recordTTL(req.TTL))
		}
	}
	d.held.Lock()
	h = d.held.GetLocked(req)
	d.held.Unlock()
	if until := time.Duration(h.recordUntil) * time.Second; until > sent.Sub(d.epoch)+recordTTL(req.TTL) || recordDue(h, d.since(), req.TTL) {
		t.Errorf("after a due refresh the record's noted expiry is %v (driver clock), want by the refresh's sending plus %v, and not due", until, recordTTL(req.TTL))
	}
}

// A grant record must outlive its lock on every server: a record not due
// (recordDue false at now) ends at least a TTL after the lock, extended to
// now+TTL by a round that may run up to a TTL late, could end; and no record
// comes due sooner than half of recordKeep before its end, as before phases.
func TestGrantRecordMarginKeepsTheRecordPastALateRefreshForEveryPhase(t *testing.T) {
	for _, ttl := range []time.Duration{time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second,
		time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 30 * 24 * time.Hour} {
		for p := range 256 {
			m := recordMargin(ttl, uint8(p))
			if m < ttl && m < recordKeep(ttl)/2 {
				t.Errorf("TTL %v, phase %d: margin %v is under the TTL", ttl, p, m)
			}
			if m > recordKeep(ttl)/2 {
				t.Errorf("TTL %v, phase %d: margin %v is over half of recordKeep %v", ttl, p, m, recordKeep(ttl))
			}
		}
	}
}

// Locks granted in a burst must not extend their grant records all at once:
// 256 granted together come due over at least 14 s at TTL 3 s (a quarter of
// recordKeep, less a second), at most 40 in any one second.
func TestGrantRecordsOfLocksGrantedTogetherComeDueSpreadOut(t *testing.T) {
	ctx, d, _ := batchDriver(t)
	const n, ttl = 256, 3 * time.Second
	held := make([]heldLock, n)
	for i := range held {
		req := &driver.Request{Key: fmt.Sprintf("spread/%d", i), Owner: fmt.Sprintf("owner-%d", i), TTL: ttl, Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		d.held.Lock()
		held[i] = d.held.GetLocked(req)
		d.held.Unlock()
	}
	// As if all were written in the same second: only the phases differ.
	until := held[0].recordUntil
	first, last := time.Duration(1<<62), time.Duration(0)
	perSecond := map[time.Duration]int{}
	for _, h := range held {
		h.recordUntil = until
		now := time.Duration(0)
		for !recordDue(h, now, ttl) {
			now += 100 * time.Millisecond
		}
		first, last = min(first, now), max(last, now)
		perSecond[now/time.Second]++
	}
	if spread := last - first; spread < recordKeep(ttl)/4-time.Second {
		t.Errorf("the records of %d locks granted together come due within %v, want over at least %v", n, spread, recordKeep(ttl)/4-time.Second)
	}
	for sec, c := range perSecond {
		if c > 40 {
			t.Errorf("%d of %d records come due in second %d, want at most 40", c, n, sec)
		}
	}
}

func TestRecordKeepIsTenTTLsFromAMinuteToADay(t *testing.T) {
	for _, c := range []struct{ ttl, keep time.Duration }{
		{time.Second, time.Minute},
		{10 * time.Second, 100 * time.Second},
		{time.Hour, 10 * time.Hour},
		{time.Duration(1<<63 - 1), 24 * time.Hour},
	} {
		if got := recordKeep(c.ttl); got != c.keep {
			t.Errorf("recordKeep(%v) = %v, want %v", c.ttl, got, c.keep)
		}
	}
	if got := recordTTL(time.Duration(1<<63 - 1)); got != time.Duration(1<<63-1) {
		t.Errorf("recordTTL of the largest TTL = %v, want that TTL (no overflow)", got)
	}
	// Right after the grant the record is not due; it is once the lock
	// would come within half of recordKeep of it.
	ttl := 3 * time.Second
	h := heldLock{recordUntil: recordSecs(100*time.Second + recordTTL(ttl))}
	if recordDue(h, 100*time.Second, ttl) {
		t.Error("a record just written is due")
	}
	if !recordDue(h, 100*time.Second+recordKeep(ttl)/2+time.Second, ttl) {
		t.Error("a record within half of recordKeep of the lock's end is not due")
	}
	if !recordDue(heldLock{}, 0, ttl) {
		t.Error("a record of unknown expiry is not due")
	}
}

// A refresh batch that finds a thousand of its locks gone from a majority
// answers each of them ErrExpired and the others held, and gives back what
// the lost ones still hold on the third server in one round for all (a
// round a lock, before, held the whole batch's answers back until its
// other locks' validity ran out). A lock whose Release is under way (out of
// the driver's held locks) is left to that Release: the refresh reports it
// gone but does not give it back.
func TestRefreshBatchFindingAThousandLostGivesThemBackInOneRound(t *testing.T) {
	ctx, d, admin := batchDriver(t)
	const n, lost = 2000, 1000
	reqs := make([]*driver.Request, n)
	for i := range reqs {
		reqs[i] = &driver.Request{Key: fmt.Sprintf("many/%d", i), Owner: fmt.Sprintf("owner-%d", i), TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})}
		if err := tryAcquireThroughStalls(ctx, d, reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range d.RefreshBatch(ctx, reqs) { // loads the scripts
		if err != nil {
			t.Fatalf("first refresh of %s: %v", reqs[i].Key, err)
		}
	}
	d.settle()
	// The first lost locks, gone from servers 1 and 2; the last of them as
	// if its Release had begun.
	releasing := reqs[lost-1]
	d.held.Lock()
	d.held.TakeLocked(releasing)
	d.held.Unlock()
	for _, a := range admin[:2] {
		for _, r := range reqs[:lost] {
			if err := a.Del(ctx, d.keys(r.Key).Lock).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Round trips to each server, counted by the client as it sends them:
	// a pipeline is one, a lone command one. (The server's count of socket
	// reads, used before, also counts the chunks a large pipeline arrives in,
	// which grow with the machine's load.)
	trips := make([]*tripCounter, len(d.servers))
	for i, s := range d.servers {
		trips[i] = &tripCounter{}
		s.client.AddHook(trips[i])
	}
	want := map[int]error{}
	for i := range lost {
		want[i] = driver.ErrExpired
	}
	redistest.CheckRefreshAnswers(t, d.RefreshBatch(ctx, reqs), want)
	// The refresh's calls, the tombstone checks, the give-backs: a few
	// pipelines each (256 jobs a pipeline), not a round a lost lock.
	for s, c := range trips {
		t.Logf("server %d: %d round trips during the refresh", s+1, c.n.Load())
		if got := c.n.Load(); got > lost/10 {
			t.Errorf("server %d: %d round trips during the refresh, want far fewer than a round for each of %d lost locks", s+1, got, lost)
		}
	}
	third := admin[2]
	for _, r := range reqs[:lost-1] {
		if got, err := third.Exists(ctx, d.keys(r.Key).Lock).Result(); err != nil || got != 0 {
			t.Fatalf("lost %s still on server 3 after the refresh (%d, %v): not given back", r.Key, got, err)
		}
	}
	if got, err := third.Get(ctx, d.keys(releasing.Key).Lock).Result(); err != nil || got != releasing.Owner {
		t.Errorf("the lock being released, on server 3: %q (%v), want its owner's key left to its Release", got, err)
	}
	for _, r := range reqs[lost:] {
		if err := d.Release(ctx, r); err != nil {
			t.Errorf("release %s: %v", r.Key, err)
		}
	}
}

// batchDriver opens a Driver on three new servers, closed when t ends, with
// admin clients to them and a context of two minutes.
// tryAcquireThroughStalls takes a free lock, trying again while a majority
// does not answer in time: on a loaded machine a server can stall past the
// per-server timeout while thousands of locks are taken, and the portable
// layer would retry such a transient failure too. The tests that use it are
// about what comes after the locks are held.
func tryAcquireThroughStalls(ctx context.Context, d *Driver, r *driver.Request) error {
	for {
		_, err := d.TryAcquire(ctx, r)
		if err == nil || !errors.Is(err, driver.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
	}
}

func batchDriver(t *testing.T) (context.Context, *Driver, []*redis.Client) {
	t.Helper()
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return ctx, d, admin
}

// A server that refuses the refresh's GETEX (here an ACL without it; a server
// loading its data answers likewise) has said nothing about the lock: with
// two of three refusing, the refresh of a lock whose grant record is due
// (a script call) and of one whose record is not (plain commands) fails as
// unconfirmed (ErrNoQuorum), not as lost, and the locks stay on the servers.
func TestRefreshRefusedByTheServersIsUnconfirmedNotLost(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d, err := openURL(ctx, userURL(ctx, t, servers, admin, func(i int) []any {
		if i < 2 {
			return []any{"~*", "&*", "+@all", "-getex"}
		}
		return []any{"~*", "&*", "+@all"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reqs := []*driver.Request{
		{Key: "not-due", Owner: "owner-1", TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})},
		{Key: "due", Owner: "owner-2", TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})},
	}
	for _, r := range reqs {
		if _, err := d.TryAcquire(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	d.held.Lock()
	h := d.held.GetLocked(reqs[1])
	h.recordUntil = recordSecs(d.since() + reqs[1].TTL)
	_ = d.held.PutLocked(reqs[1], h)
	d.held.Unlock()
	for i, err := range d.RefreshBatch(ctx, reqs) {
		if !errors.Is(err, ErrNoQuorum) || errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("refresh of %s refused by two servers: %v, want ErrNoQuorum and not ErrNotHeld", reqs[i].Key, err)
		}
	}
	for s, a := range admin {
		for _, r := range reqs {
			if v := a.Get(ctx, d.keys(r.Key).Lock).Val(); v != r.Owner {
				t.Errorf("server %d: after the refused refresh %s holds %q, want its owner", s+1, r.Key, v)
			}
		}
	}
	for _, r := range reqs {
		if err := d.Release(ctx, r); err != nil {
			t.Errorf("release %s: %v", r.Key, err)
		}
	}
}

// tripCounter is a go-redis hook that counts the round trips a client makes.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}
