package redlockdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto/redistest"
	"github.com/distlock/lock/internal/testserver"
)

// setReqs returns a set's requests for keys (given in byte order), each with
// an owner of its own.
func setReqs(ttl time.Duration, keys ...string) []*driver.Request {
	reqs := make([]*driver.Request, len(keys))
	for i, k := range keys {
		var b [16]byte
		_, _ = rand.Read(b[:])
		reqs[i] = &driver.Request{Key: k, Owner: hex.EncodeToString(b[:]), TTL: ttl, Label: "label of " + k, Lost: driver.LostFunc(func(error) {})}
	}
	return reqs
}

// openSet opens a driver over servers, closed at the end.
func openSet(t *testing.T, ctx context.Context, servers []*testserver.Server) *Driver {
	t.Helper()
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// untouched fails t unless no key of the locks on keys exists on any of the
// servers: nothing of a refused set is left.
func untouched(t *testing.T, ctx context.Context, admin []*redis.Client, d *Driver, keys ...string) {
	t.Helper()
	d.settle()
	for i, a := range admin {
		for _, key := range keys {
			k := d.keys(key)
			if n, err := a.Exists(ctx, k.Lock, k.Grant).Result(); err != nil || n != 0 {
				t.Errorf("server %d: %d keys of the lock on %q exist after the refused set (%v), want none", i+1, n, key, err)
			}
		}
	}
}

// AcquireAll of four free keys sends each server one script call, and each
// member is then a lock like one taken alone: Inspect sees its owner and
// label, Refresh extends it, Release deletes it everywhere.
func TestFourFreeKeysAreTakenInOneRequest(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d := openSet(t, ctx, servers)
	lk := lock.New(d)
	defer lk.Close()
	scripts := func() []int64 {
		d.settle() // the round's last server has answered
		out := make([]int64, len(admin))
		for i, a := range admin {
			_, n, err := redistest.ServerCalls(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = n
		}
		return out
	}
	// The first set loads the script.
	warm, err := lk.AcquireAll(ctx, []string{"warm/1", "warm/2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := scripts()
	s, err := lk.AcquireAll(ctx, []string{"d", "c", "b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range scripts() {
		if n-before[i] != 1 {
			t.Errorf("server %d ran %d scripts for AcquireAll of four free keys, want 1", i+1, n-before[i])
		}
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}

	reqs := setReqs(time.Minute, "a", "b", "c", "d")
	gs, err := d.TryAcquireSet(ctx, reqs)
	if err != nil || len(gs) != len(reqs) {
		t.Fatalf("TryAcquireSet of four free keys = %v, %v", gs, err)
	}
	d.settle()
	for _, req := range reqs {
		in, err := d.Inspect(ctx, req.Key)
		if err != nil || len(in.Holders) != 1 || in.Holders[0].Owner != req.Owner || in.Holders[0].Label != req.Label {
			t.Errorf("Inspect(%q) = %+v, %v, want owner %s with label %q", req.Key, in, err, req.Owner, req.Label)
		}
		if err := d.Refresh(ctx, req); err != nil {
			t.Errorf("Refresh(%q): %v", req.Key, err)
		}
		if err := d.Release(ctx, req); err != nil {
			t.Errorf("Release(%q): %v", req.Key, err)
		}
	}
	untouched(t, ctx, admin, d, "a", "b", "c", "d")
}

// A set with one key held elsewhere is refused as ErrLocked, and nothing of
// it is left on any server.
func TestASetWithOneHeldKeyTakesNothing(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d, other := openSet(t, ctx, servers), openSet(t, ctx, servers)
	if _, err := other.TryAcquire(ctx, setReqs(time.Minute, "c")[0]); err != nil {
		t.Fatal(err)
	}
	other.settle()
	if gs, err := d.TryAcquireSet(ctx, setReqs(time.Minute, "a", "b", "c", "d")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("TryAcquireSet with c held elsewhere = %v, %v, want ErrLocked", gs, err)
	}
	untouched(t, ctx, admin, d, "a", "b", "d")
}

// A set is granted when a majority of the servers took all of it: a key held
// on one server of three does not stop it, and that server took nothing. Held
// on two servers (another key on each), no majority took the set, and the
// one server that did gives it back.
func TestASetNeedsAMajorityAndGivesBackAMinoritysGrant(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d := openSet(t, ctx, servers)
	// Another client's locks, on one server each.
	if err := admin[0].Set(ctx, d.keys("c").Lock, "someone", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := setReqs(time.Minute, "a", "b", "c")
	if gs, err := d.TryAcquireSet(ctx, reqs); err != nil || len(gs) != 3 {
		t.Fatalf("TryAcquireSet with c held on one server of three = %v, %v, want granted", gs, err)
	}
	untouched(t, ctx, admin[:1], d, "a", "b")
	for _, r := range reqs {
		if err := d.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin[1].Set(ctx, d.keys("d").Lock, "someone", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if gs, err := d.TryAcquireSet(ctx, setReqs(time.Minute, "a", "c", "d")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("TryAcquireSet with c and d each held on one server of three = %v, %v, want ErrLocked", gs, err)
	}
	untouched(t, ctx, admin[2:], d, "a", "c", "d")
}

// A free key that a writer waits for (the holder's lock vanished before the
// writer looked again) is not taken by a set past it, and the set takes
// nothing else either.
func TestASetIsNotGrantedPastAKeysWaiters(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d, holder, w := openSet(t, ctx, servers), openSet(t, ctx, servers), openSet(t, ctx, servers)
	if _, err := holder.TryAcquire(ctx, setReqs(time.Minute, "b")[0]); err != nil {
		t.Fatal(err)
	}
	holder.settle()
	// The writer looks again when the holder's TTL ends or a third of its
	// lease (of its TTL: 10s) has passed, unless told of a release: the
	// deletion below tells it nothing.
	wctx, wcancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	wreq := setReqs(30*time.Second, "b")[0]
	go func() {
		_, err := w.Acquire(wctx, wreq)
		waited <- err
	}()
	k := d.keys("b")
	for i, a := range admin {
		deadline := time.Now().Add(10 * time.Second)
		for a.HLen(ctx, k.Writers).Val() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the writer did not register on server %d", i+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := a.Del(ctx, k.Lock).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if gs, err := d.TryAcquireSet(ctx, setReqs(time.Minute, "a", "b")); !errors.Is(err, driver.ErrLocked) {
		t.Errorf("TryAcquireSet with b free but waited for = %v, %v, want ErrLocked", gs, err)
	}
	untouched(t, ctx, admin, d, "a")
	wcancel()
	select {
	case err := <-waited:
		// Still waiting, or (when a server was slow to refuse the set, whose
		// give-back round tells the key's waiters) granted b, the writer's
		// due: either way nobody passed it.
		switch {
		case err == nil:
			if err := w.Release(ctx, wreq); err != nil {
				t.Errorf("the writer's release of b: %v", err)
			}
		case !errors.Is(err, context.Canceled):
			t.Errorf("the writer's Acquire = %v, want context.Canceled or b granted", err)
		}
	case <-ctx.Done():
		t.Fatal("the writer's Acquire did not end with its context")
	}
}

// Sets of shared locks are not taken in one request: ErrUnsupported, nothing
// taken, and package lock takes them one at a time.
func TestASetOfSharedLocksIsUnsupported(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	d := openSet(t, ctx, servers)
	reqs := setReqs(time.Minute, "a", "b")
	for _, r := range reqs {
		r.Shared = true
	}
	if gs, err := d.TryAcquireSet(ctx, reqs); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("TryAcquireSet of shared locks = %v, %v, want ErrUnsupported", gs, err)
	}
	untouched(t, ctx, admin, d, "a", "b")
	lk := lock.New(d, lock.WithShared(true))
	s, err := lk.AcquireAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
