package redlockdriver

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/testserver"
)

// The holder's record lies beside the lock on every server, in the grant key
// ("owner 0 since-µs label", outliving the lock by at most recordKeep), while the lock key holds
// nothing but the owner, as any Redlock client writes it; a shared hold's
// record is its entry in the labels hash; both go with the hold.
func TestRecordLiesBesideTheLockAndGoesWithIt(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	k := d.keys("k")
	req := &driver.Request{Key: "k", Owner: "owner-1", TTL: 10 * time.Second, Label: `{"owner":"a b","since":1}`}
	before := time.Now()
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	d.settle() // the last server has answered
	for i, a := range admin {
		if v, err := a.Get(ctx, k.Lock).Result(); err != nil || v != req.Owner {
			t.Errorf("server %d: the lock key holds %q (%v), want the owner alone", i+1, v, err)
		}
		rec, err := a.Get(ctx, k.Grant).Result()
		if err != nil {
			t.Fatalf("server %d: no grant record: %v", i+1, err)
		}
		owner, rest, _ := strings.Cut(rec, " ")
		tok, us, label, ok := redislayout.ParseRecord(rest)
		since := time.UnixMicro(us)
		if owner != req.Owner || !ok || tok != 0 || label != req.Label || since.Before(before.Add(-time.Second)) || since.After(time.Now().Add(time.Second)) {
			t.Errorf("server %d: grant record %q, want owner, 0, the grant's time and the label", i+1, rec)
		}
		// The record outlives the lock (refreshes extend it only when due),
		// by at most recordKeep.
		lockTTL := a.PTTL(ctx, k.Lock).Val()
		if pt := a.PTTL(ctx, k.Grant).Val(); pt <= 0 || pt < lockTTL || pt > recordTTL(req.TTL) {
			t.Errorf("server %d: the record's TTL %v, want from the lock's (%v) to %v", i+1, pt, lockTTL, recordTTL(req.TTL))
		}
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}

	r1 := &driver.Request{Key: "k", Owner: "reader-1", TTL: 10 * time.Second, Shared: true, Label: "L1"}
	r2 := &driver.Request{Key: "k", Owner: "reader-2", TTL: 10 * time.Second, Shared: true, Label: "L2"}
	for _, r := range []*driver.Request{r1, r2} {
		if _, err := d.TryAcquire(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	d.settle()
	for i, a := range admin {
		recs, err := a.HGetAll(ctx, k.Labels).Result()
		if err != nil || !strings.HasSuffix(recs["reader-1"], " L1") || !strings.HasSuffix(recs["reader-2"], " L2") {
			t.Errorf("server %d: labels %q (%v), want both readers' records", i+1, recs, err)
		}
	}
	for _, r := range []*driver.Request{r1, r2} {
		if err := d.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	d.settle()
	if keys := residue(ctx, t, admin, DefaultPrefix); len(keys) > 0 {
		t.Errorf("left after the releases: %v", keys)
	}
}

// Inspect reports a holder only where a majority of the servers hold its
// owner: a minority's key (a contender's partial round, what is left of a
// lost lock) shows the key free; a majority's, even another Redlock client's
// without a record, shows it held, named by its value.
func TestInspectReportsWhatAMajorityHolds(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 5)
	admin := admins(t, servers)
	lk, err := lock.Open(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	key := DefaultPrefix + ":{k}"
	for i, a := range admin[:2] {
		if err := a.Set(ctx, key, "other-client", 10*time.Second).Err(); err != nil {
			t.Fatalf("server %d: %v", i+1, err)
		}
	}
	in, err := lk.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if in.Held || in.Holders != 0 {
		t.Errorf("Inspect with the key on 2 of 5 servers: %+v, want free", in)
	}
	if err := admin[2].Set(ctx, key, "other-client", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	// Different TTLs: the majority holds until its third-latest expiry.
	for i, ttl := range []time.Duration{4 * time.Second, 6 * time.Second, 8 * time.Second} {
		if err := admin[i].PExpire(ctx, key, ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now()
	in, err = lk.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Holders != 1 || in.Owner != "other-client" || in.Waiters != -1 || in.Token != 0 {
		t.Errorf("Inspect with another client's lock on 3 of 5 servers: %+v, want held by other-client, Waiters -1, no token", in)
	}
	if lo, hi := before.Add(4*time.Second-driver.Drift(4*time.Second)-time.Second), before.Add(4*time.Second); in.Expires.Before(lo) || in.Expires.After(hi) {
		t.Errorf("Expires %v, want the earliest of the three expiries less the drift: in [%v, %v]", in.Expires, lo, hi)
	}
	if keys, err := lk.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"k"}) {
		t.Errorf("List = %q, %v; want [k]", keys, err)
	}
	if _, err := lk.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire of the key another client holds on a majority: %v, want ErrLocked", err)
	}
}

// Inspect and List need a majority of answers, and a majority suffices: with
// two of five servers paused they still report the holder, and with three
// paused they fail with ErrNoQuorum (ErrUnavailable: it may pass).
func TestInspectNeedsAMajorityOfAnswers(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 5)
	lk, err := lock.Open(ctx, redlockURL(servers), lock.WithOwnerName("holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, s := range servers[:2] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		defer s.Resume()
	}
	if in, err := lk.Inspect(ctx, "k"); err != nil || !in.Held || in.Owner != "holder" {
		t.Errorf("Inspect with 2 of 5 servers paused: %+v, %v; want held by holder", in, err)
	}
	if keys, err := lk.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"k"}) {
		t.Errorf("List with 2 of 5 servers paused = %q, %v; want [k]", keys, err)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	if _, err := lk.Inspect(ctx, "k"); !errors.Is(err, ErrNoQuorum) || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Inspect with 3 of 5 servers paused: %v, want ErrNoQuorum and ErrUnavailable", err)
	}
	if _, err := lk.List(ctx, ""); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("List with 3 of 5 servers paused: %v, want ErrNoQuorum", err)
	}
}

// ForceRelease leaves a tombstone for the evicted owner on every server,
// living a few of the lock's TTLs and then gone; the evicted holder's
// Refresh reads it and reports ErrForceReleased; a holder in the evicting
// Driver itself learns it at once.
func TestForceReleaseTombstoneIsReadByRefreshAndExpires(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	// The holder does not refresh: its TTL must outlast the steps up to
	// ForceRelease on a loaded machine (a TTL of 1s ran out on one server
	// first there, which then had nothing to evict).
	const ttl = 3 * time.Second
	holder, err := lock.Open(ctx, redlockURL(servers), lock.WithTTL(ttl), lock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	op, err := lock.Open(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	l, err := holder.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// A grant needs a majority, not every server: on a loaded machine one
	// server's answer can come too late and that server holds nothing. Each
	// server that holds the lock must get the tombstone, however late its
	// answer to ForceRelease (which returns once a majority evicted).
	keys := redislayout.NewKeys(DefaultPrefix, "k")
	var holding []int
	for i, a := range admin {
		if a.Exists(ctx, keys.Lock).Val() == 1 {
			holding = append(holding, i)
		}
	}
	if len(holding) < 2 {
		t.Fatalf("the lock is on servers %v, want a majority of 3", holding)
	}
	if err := op.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for _, i := range holding {
		a := admin[i]
		deadline := time.Now().Add(10 * time.Second)
		for a.HLen(ctx, keys.Forced).Val() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		n, err := a.HLen(ctx, keys.Forced).Result()
		pt := a.PTTL(ctx, keys.Forced).Val()
		if err != nil || n != 1 || pt <= kit.TombstoneMin || pt > 3*ttl+kit.TombstoneMin {
			t.Errorf("server %d: tombstones %d (%v), TTL %v; want one, for about 3 TTLs + %v", i+1, n, err, pt, kit.TombstoneMin)
		}
	}
	forced := keys.Forced
	if err := l.Refresh(ctx); !errors.Is(err, lock.ErrForceReleased) || !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("the evicted holder's Refresh: %v, want ErrNotHeld and ErrForceReleased", err)
	}
	if err := op.ForceRelease(ctx, "k"); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("ForceRelease of the freed key: %v, want ErrNotHeld", err)
	}

	own, err := holder.Acquire(ctx, "own")
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.ForceRelease(ctx, "own"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-own.Lost():
	default:
		t.Error("a lock of the evicting Driver: Lost still open after ForceRelease returned")
	}
	if err := own.Err(); !errors.Is(err, lock.ErrForceReleased) {
		t.Errorf("its Err: %v, want ErrForceReleased", err)
	}

	wait := 3*ttl + kit.TombstoneMin + 5*time.Second
	deadline := time.Now().Add(wait)
	for admin[0].Exists(ctx, forced).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the tombstones still live %v after ForceRelease", wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Relabel is owner-checked and counts on a majority: the holder changes its
// label on every server that holds it, and a stranger changes nothing.
func TestRelabelIsOwnerCheckedOnAMajority(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := &driver.Request{Key: "k", Owner: "owner-1", TTL: 10 * time.Second, Label: "old"}
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	d.settle()
	stranger := &driver.Request{Key: "k", Owner: "owner-2", TTL: 10 * time.Second}
	if err := d.Relabel(ctx, stranger, "theirs"); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Relabel by a stranger: %v, want ErrNotHeld", err)
	}
	// One server lost the lock: a majority still holds it and is relabelled.
	if err := admin[0].Del(ctx, d.keys("k").Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := d.Relabel(ctx, req, "new"); err != nil {
		t.Fatalf("Relabel on 2 of 3 servers: %v", err)
	}
	in, err := d.Inspect(ctx, "k")
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Label != "new" || req.Label != "old" {
		t.Errorf("after Relabel: %+v, %v, request's label %q; want one holder labelled new, the request's label unchanged", in, err, req.Label)
	}
	if err := admin[1].Del(ctx, d.keys("k").Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := d.Relabel(ctx, req, "newer"); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Relabel with the lock on 1 of 3 servers: %v, want ErrNotHeld", err)
	}
}

// List finds held keys under a prefix, escaped as the driver escapes them
// and matched literally (glob characters in the prefix are not patterns).
func TestListMatchesThePrefixLiterally(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	lk, err := lock.Open(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	names := []string{"a*b/1", "a*b/2", "axb/1", "{x}%/1", "[ab]/1", `a\b`}
	for _, n := range names {
		l, err := lk.Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	for prefix, want := range map[string][]string{
		"a*b/": {"a*b/1", "a*b/2"},
		"{x}%": {"{x}%/1"},
		"[ab]": {"[ab]/1"},
		`a\`:   {`a\b`},
		"":     {"[ab]/1", "a*b/1", "a*b/2", `a\b`, "axb/1", "{x}%/1"},
	} {
		got, err := lk.List(ctx, prefix)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, %v; want %q", prefix, got, err, want)
		}
	}
}

// A Redlock client that knows nothing of the records (SET NX PX, then a
// compare-and-delete) still excludes and is excluded; the driver's records
// are extra keys beside the lock, never the lock's value.
func TestPlainRedlockClientStillInteroperates(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	lk, err := lock.Open(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	key := DefaultPrefix + ":{k}"
	won := 0
	plainHas := make([]bool, len(admin)) // a server the driver had not reached yet
	for i, a := range admin {
		if ok, err := a.SetNX(ctx, key, "plain", 10*time.Second).Result(); err == nil && ok {
			won++
			plainHas[i] = true
		}
	}
	if won > 1 {
		t.Errorf("a plain client won %d of 3 servers of a held lock", won)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Release returns once a majority has answered; the last server's
	// release may still be on its way. A server the plain client already
	// took above (the driver's round was decided without it) stays its own.
	for i, a := range admin {
		if plainHas[i] {
			if v, err := a.Get(ctx, key).Result(); err != nil || v != "plain" {
				t.Fatalf("server %d: the plain client's lock holds %q (%v) after the release, want it kept", i+1, v, err)
			}
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			ok, err := a.SetNX(ctx, key, "plain", 10*time.Second).Result()
			if err == nil && ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %d: a plain client after the release: %v %v", i+1, ok, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if _, err := lk.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire of the plain client's lock: %v, want ErrLocked", err)
	}
	del := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	for i, a := range admin {
		if n, err := del.Run(ctx, a, []string{key}, "plain").Int(); err != nil || n != 1 {
			t.Fatalf("server %d: the plain client's release: %d %v", i+1, n, err)
		}
	}
	l2, err := lk.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the plain client's release: %v", err)
	}
	_ = l2.Release(ctx)
}

// ForceRelease wakes the waiting drivers as a release does: a waiter gets the
// lock at once, not when the evicted holder's TTL runs out.
func TestForceReleaseWakesTheWaiters(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	var lks [3]*lock.Locker
	for i := range lks {
		lk, err := lock.Open(ctx, redlockURL(servers), lock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Close()
		lks[i] = lk
	}
	holder, waiter, op := lks[0], lks[1], lks[2]
	if _, err := holder.Acquire(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "k")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	admin := admins(t, servers)
	waitUntil(ctx, t, "the waiter to register on every server", func() bool {
		for _, a := range admin {
			if a.Exists(ctx, DefaultPrefix+":{k}:waiters").Val() == 0 {
				return false
			}
		}
		return true
	})
	forced := time.Now()
	if err := op.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		t.Logf("the waiter held the lock %v after ForceRelease began", time.Since(forced).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		// Unwoken, it would look again only when its registration is due
		// for renewal, a third of the 30s TTL after it registered.
		t.Fatal("the waiter did not get the lock within 5s of ForceRelease (the evicted lock's TTL is 30s)")
	}
}
