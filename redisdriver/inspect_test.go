package redisdriver

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
	"github.com/distlock/lock/internal/testserver"
)

// newInspectDriver is a driver over the shared server with its own prefix,
// used without package lock, and an operator's client.
func newInspectDriver(t *testing.T) (*Driver, *redis.Client, context.Context) {
	t.Helper()
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	d, err := New(adminClient(t, url), WithPrefix("inspect-"+randomHex(4)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, adminClient(t, url), ctx
}

// The lock key keeps the plain owner; the fence record beside it carries the
// token, grant time, owner and label, lives at least as long as the lock
// (refresh extends it), and after the release no other key is left.
func TestHoldersRecordRidesInTheFenceRecord(t *testing.T) {
	d, admin, ctx := newInspectDriver(t)
	k := d.keys("job")
	req := &driver.Request{Key: "job", Owner: randomHex(16), TTL: 2 * time.Second, Label: `{"owner":"a b"}`}
	before := time.Now()
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := admin.Get(ctx, k.Lock).Result(); err != nil || v != req.Owner {
		t.Fatalf("lock key = %q, %v; want the plain owner", v, err)
	}
	rec, err := admin.Get(ctx, k.Fence).Result()
	if err != nil {
		t.Fatal(err)
	}
	tok, rest, _ := strings.Cut(rec, " ")
	if tok != strconv.FormatUint(g.Token, 10) || !strings.HasSuffix(rest, " "+req.Owner+" "+req.Label) {
		t.Fatalf("fence record %q, want token %d, the grant time, owner %s and the label", rec, g.Token, req.Owner)
	}
	in, err := d.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Holders) != 1 {
		t.Fatalf("Inspect: %+v", in)
	}
	h := in.Holders[0]
	if h.Owner != req.Owner || h.Label != req.Label || h.Token != g.Token || h.Shared || in.Token != g.Token || in.Waiters != 0 {
		t.Errorf("Inspect: %+v, want owner %s token %d label %q", in, req.Owner, g.Token, req.Label)
	}
	if h.Since.Before(before.Add(-time.Second)) || h.Since.After(time.Now().Add(time.Second)) {
		t.Errorf("Since %v, not the grant's time (%v)", h.Since, before)
	}
	if left := time.Until(h.Expires); left <= 0 || left > 3*time.Second {
		t.Errorf("Expires in %v, want within the 2s TTL", left)
	}

	req.TTL = 2 * fenceKeep
	if err := d.Refresh(ctx, req); err != nil {
		t.Fatal(err)
	}
	lockTTL, _ := admin.PTTL(ctx, k.Lock).Result()
	recTTL, _ := admin.PTTL(ctx, k.Fence).Result()
	if lockTTL < fenceKeep || recTTL < lockTTL {
		t.Errorf("after a refresh to two days: lock TTL %v, fence record TTL %v; want the record to outlive the lock", lockTTL, recTTL)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Exists(ctx, k.Lock, k.Labels, k.Queue, k.Waiters, k.Holders, k.Forced).Result(); err != nil || n != 0 {
		t.Errorf("%d keys of the lock left after its release (%v)", n, err)
	}
	if in, err := d.Inspect(ctx, "job"); err != nil || len(in.Holders) != 0 || in.Token != g.Token {
		t.Errorf("Inspect after the release: %+v, %v; want free, with the last token %d", in, err, g.Token)
	}
}

// A waiter's label waits with it, and the release that hands it the lock
// writes its record; shared holders have a record each, and Relabel changes
// only the label.
func TestHandoffAndSharedHoldsKeepEachHoldersLabel(t *testing.T) {
	d, admin, ctx := newInspectDriver(t)
	a := &driver.Request{Key: "k", Owner: randomHex(16), TTL: 5 * time.Second, Label: "first"}
	if _, err := d.TryAcquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := &driver.Request{Key: "k", Owner: randomHex(16), TTL: 5 * time.Second, Label: "second"}
	got := make(chan driver.Grant, 1)
	go func() {
		g, err := d.Acquire(ctx, b)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	waitQueueLen(t, ctx, admin, d.keys("k").Queue, 1)
	if in, err := d.Inspect(ctx, "k"); err != nil || in.Waiters != 1 {
		t.Fatalf("Inspect with a waiter: %+v, %v", in, err)
	}
	if err := d.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	g := <-got
	in, err := d.Inspect(ctx, "k")
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Owner != b.Owner || in.Holders[0].Label != "second" || in.Holders[0].Token != g.Token || in.Waiters != 0 {
		t.Fatalf("Inspect after the handoff: %+v, %v; want %s labelled second with token %d", in, err, b.Owner, g.Token)
	}
	since := in.Holders[0].Since
	if err := d.Relabel(ctx, b, "renamed"); err != nil {
		t.Fatal(err)
	}
	in, err = d.Inspect(ctx, "k")
	if err != nil || in.Holders[0].Label != "renamed" || in.Holders[0].Token != g.Token || !in.Holders[0].Since.Equal(since) {
		t.Fatalf("Inspect after Relabel: %+v, %v; want the new label, the same token and grant time", in, err)
	}
	if err := d.Relabel(ctx, a, "stale"); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Relabel by a former holder = %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, b); err != nil {
		t.Fatal(err)
	}

	var tokens []uint64
	var reqs []*driver.Request
	for _, name := range []string{"r1", "r2"} {
		r := &driver.Request{Key: "s", Owner: randomHex(16), TTL: 5 * time.Second, Shared: true, Label: name}
		g, err := d.TryAcquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		tokens, reqs = append(tokens, g.Token), append(reqs, r)
	}
	in, err = d.Inspect(ctx, "s")
	if err != nil || len(in.Holders) != 2 || in.Token != tokens[1] {
		t.Fatalf("Inspect of two readers: %+v, %v", in, err)
	}
	for i, h := range in.Holders {
		if h.Owner != reqs[i].Owner || h.Label != reqs[i].Label || h.Token != tokens[i] || !h.Shared || h.Since.IsZero() || h.Expires.IsZero() {
			t.Errorf("reader %d: %+v, want owner %s label %s token %d, shared, with times", i, h, reqs[i].Owner, reqs[i].Label, tokens[i])
		}
	}
	if err := d.Relabel(ctx, reqs[0], "r1'"); err != nil {
		t.Fatal(err)
	}
	if in, _ := d.Inspect(ctx, "s"); in.Holders[0].Label != "r1'" || in.Holders[1].Label != "r2" {
		t.Errorf("after relabelling the first reader: %+v", in.Holders)
	}
	for _, r := range reqs {
		if err := d.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	k := d.keys("s")
	if n, err := admin.Exists(ctx, k.Lock, k.Holders, k.Labels, k.Queue, k.Waiters).Result(); err != nil || n != 0 {
		t.Errorf("%d keys of the shared lock left after the releases (%v)", n, err)
	}
}

// A lock taken by a standard SET NX client is inspected, listed and evicted
// like ours: its value stands for the owner's name.
func TestStandardSetNXLockIsInspectedListedAndEvicted(t *testing.T) {
	d, admin, ctx := newInspectDriver(t)
	lk := lock.New(d)
	defer lk.Close()
	k := d.keys("std")
	if err := admin.Set(ctx, k.Lock, "worker-7", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	in, err := lk.Inspect(ctx, "std")
	if err != nil || !in.Held || in.Holders != 1 || in.Owner != "worker-7" || in.Expires.IsZero() || !in.Since.IsZero() {
		t.Errorf("Inspect of a standard client's lock: %+v, %v; want held by worker-7, expiring, no Since", in, err)
	}
	if keys, err := lk.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"std"}) {
		t.Errorf("List = %q, %v; want [std]", keys, err)
	}
	if n, err := d.ForceRelease(ctx, "std"); err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	if n, err := admin.Exists(ctx, k.Lock).Result(); err != nil || n != 0 {
		t.Errorf("the standard client's lock is still there (%v)", err)
	}
	if ok, err := admin.SetNX(ctx, k.Lock, "worker-8", time.Second).Result(); err != nil || !ok {
		t.Errorf("a standard SET NX after ForceRelease = %v, %v; want taken", ok, err)
	}
}

// ForceRelease leaves a tombstone that makes the evicted holder's refresh say
// "forced", for a bounded time; an ordinary loss stays an ordinary loss; the
// first waiter gets the key; and the next token exceeds the evicted one even
// when it is ahead of the server's clock.
func TestForceReleaseTombstoneWaiterAndFence(t *testing.T) {
	d, admin, ctx := newInspectDriver(t)
	k := d.keys("f")
	// A fence record ahead of the clock (as if another server's clock ran
	// ahead): the eviction must keep it, or the next token would fall back
	// to the clock.
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := admin.Set(ctx, k.Fence, ahead, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	held := &driver.Request{Key: "f", Owner: randomHex(16), TTL: 3 * time.Second}
	g, err := d.TryAcquire(ctx, held)
	if err != nil || g.Token != ahead+1 {
		t.Fatalf("TryAcquire = %+v, %v; want token %d", g, err, ahead+1)
	}
	w := &driver.Request{Key: "f", Owner: randomHex(16), TTL: 3 * time.Second}
	got := make(chan driver.Grant, 1)
	go func() {
		g, err := d.Acquire(ctx, w)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	waitQueueLen(t, ctx, admin, k.Queue, 1)

	if n, err := d.ForceRelease(ctx, "f"); err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	select {
	case g2 := <-got:
		if g2.Token <= g.Token {
			t.Errorf("the waiter's token %d after the evicted %d", g2.Token, g.Token)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the key")
	}
	err = d.Refresh(ctx, held)
	if !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, driver.ErrForceReleased) {
		t.Errorf("the evicted holder's Refresh = %v, want ErrNotHeld and ErrForceReleased", err)
	}
	if err := d.Release(ctx, held); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("the evicted holder's Release = %v, want ErrNotHeld", err)
	}
	if v, err := admin.Get(ctx, k.Lock).Result(); err != nil || v != w.Owner {
		t.Errorf("lock = %q, %v; the evicted holder's Release freed the next holder's lock", v, err)
	}
	ttl, err := admin.PTTL(ctx, k.Forced).Result()
	if err != nil || ttl <= 0 || ttl > kit.TombstoneMin+3*held.TTL {
		t.Errorf("tombstones' TTL %v (%v), want positive and at most %v", ttl, err, kit.TombstoneMin+3*held.TTL)
	}

	// An ordinary loss (the key deleted by hand) is not reported as forced.
	if err := admin.Del(ctx, k.Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(ctx, w); !errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrForceReleased) {
		t.Errorf("Refresh of a lock deleted by hand = %v, want ErrNotHeld only", err)
	}
	if n, err := d.ForceRelease(ctx, "f"); !errors.Is(err, driver.ErrNotHeld) || n != 0 {
		t.Errorf("ForceRelease of a free key = %d, %v; want ErrNotHeld", n, err)
	}
}

// List finds the lock keys under a prefix, whatever glob or brace
// characters the keys and prefix hold, and nothing of another prefix.
func TestListMatchesThePrefixLiterally(t *testing.T) {
	d, _, ctx := newInspectDriver(t)
	other, err := New(d.client, WithPrefix(d.prefix+"x"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	keys := []string{"a*", "a*b", "ab", "a?", "[a]", `a\`, "{a}", "a}", "a%7D", "ключ"}
	for _, key := range keys {
		if _, err := d.TryAcquire(ctx, &driver.Request{Key: key, Owner: randomHex(16), TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.TryAcquire(ctx, &driver.Request{Key: "a*", Owner: randomHex(16), TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string][]string{
		"":   {"[a]", "a%7D", "a*", "a*b", "a?", `a\`, "ab", "a}", "{a}", "ключ"},
		"a*": {"a*", "a*b"},
		"a?": {"a?"},
		"[":  {"[a]"},
		`a\`: {`a\`},
		"{":  {"{a}"},
		"a}": {"a}"},
		"a%": {"a%7D"},
		"к":  {"ключ"},
		"z":  nil,
	} {
		got, err := d.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// Watch signals every grant, relabelling, release and eviction; the scripts
// publish only while someone watches the key; the channel closes when ctx
// ends.
func TestWatchSignalsChangesAndScriptsPublishOnlyWhenWatched(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, srv.URL())
	d, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	publishes := func() int64 {
		t.Helper()
		info, err := admin.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_publish:calls="); ok {
				v, _, _ := strings.Cut(rest, ",")
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	req := &driver.Request{Key: "w", Owner: randomHex(16), TTL: 5 * time.Second}
	before := publishes()
	for i := 0; i < 3; i++ {
		if _, err := d.TryAcquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := publishes() - before; n != 0 {
		t.Errorf("%d PUBLISH calls for an unwatched key, want none", n)
	}

	wctx, stop := context.WithCancel(ctx)
	c, err := d.Watch(wctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	k := d.keys("w")
	deadline, err := admin.HGet(ctx, k.Labels, "\x00watch").Int64()
	if err != nil || time.Until(time.UnixMilli(deadline)) <= 0 || time.Until(time.UnixMilli(deadline)) > watchTTL+time.Second {
		t.Errorf("watchers' deadline %v (%v), want within %v", time.UnixMilli(deadline), err, watchTTL)
	}
	if ttl, err := admin.PTTL(ctx, k.Labels).Result(); err != nil || ttl <= 0 || ttl > watchTTL {
		t.Errorf("labels TTL %v (%v), want within %v", ttl, err, watchTTL)
	}
	drain := func() {
		select {
		case <-c:
		default:
		}
	}
	expect := func(what string) {
		t.Helper()
		select {
		case _, ok := <-c:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no signal", what)
		}
	}
	drain()
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	expect("a grant")
	if err := d.Relabel(ctx, req, "x"); err != nil {
		t.Fatal(err)
	}
	expect("a relabelling")
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	expect("a release")
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	expect("a grant again")
	if _, err := d.ForceRelease(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	expect("an eviction")
	stop()
	closing := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-c:
			if !ok {
				return
			}
		case <-closing:
			t.Fatal("the watch channel did not close after its context ended")
		}
	}
}

// Inspect, List, ForceRelease, Relabel and Watch work on keys of every node
// of a Cluster.
func TestInspectionAcrossClusterNodes(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var keys []string
	nodes := map[string]bool{}
	for i := 0; i < 20; i++ {
		key := "job:" + strconv.Itoa(i)
		keys = append(keys, key)
		n, err := d.cluster.MasterForKey(ctx, d.keys(key).Lock)
		if err != nil {
			t.Fatal(err)
		}
		nodes[n.Options().Addr] = true
		req := &driver.Request{Key: key, Owner: randomHex(16), TTL: 10 * time.Second, Label: key}
		if _, err := d.TryAcquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		in, err := d.Inspect(ctx, key)
		if err != nil || len(in.Holders) != 1 || in.Holders[0].Label != key {
			t.Fatalf("Inspect(%q) = %+v, %v", key, in, err)
		}
		if err := d.Relabel(ctx, req, key+"!"); err != nil {
			t.Fatal(err)
		}
	}
	if len(nodes) != 3 {
		t.Fatalf("the keys landed on %d nodes, want 3", len(nodes))
	}
	slices.Sort(keys)
	if got, err := d.List(ctx, "job:"); err != nil || !slices.Equal(got, keys) {
		t.Errorf("List = %q, %v; want %q", got, err, keys)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := d.Watch(wctx, keys[7])
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
	}
	if n, err := d.ForceRelease(ctx, keys[7]); err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no watch signal for an eviction in a Cluster")
	}
}
