package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
	"github.com/distlock/lock/internal/testserver"
)

// setReqs returns a set's requests for keys (given in byte order), each with
// an owner and a label of its own.
func setReqs(ttl time.Duration, keys ...string) []*driver.Request {
	reqs := make([]*driver.Request, len(keys))
	for i, k := range keys {
		reqs[i] = &driver.Request{Key: k, Owner: randomHex(16), TTL: ttl, Label: "label of " + k, Lost: driver.LostFunc(func(error) {})}
	}
	return reqs
}

// setDriver is a driver on its own client under prefix, closed at the end.
func setDriver(t *testing.T, url, prefix string, opts ...Option) *Driver {
	t.Helper()
	d, err := New(adminClient(t, url), append([]Option{WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// untouched fails t unless none of the keys of key's lock exists: a refused
// set leaves no trace, not even a fence record.
func untouched(t *testing.T, ctx context.Context, admin redis.Cmdable, d *Driver, key string) {
	t.Helper()
	if n, err := admin.Exists(ctx, scriptKeysWithForced(d.keys(key))...).Result(); err != nil || n != 0 {
		t.Errorf("%d keys of the lock on %q exist after the refused set (%v), want none", n, key, err)
	}
}

// AcquireAll of four free keys is one round trip (one EVALSHA), with and
// without fencing, and each member is then a lock like one taken alone:
// Inspect sees its owner, label and token, Refresh extends it, Release
// deletes it.
func TestFourFreeKeysAreTakenInOneRequest(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, fencing := range []bool{true, false} {
		t.Run(fmt.Sprintf("fencing=%v", fencing), func(t *testing.T) {
			c := adminClient(t, url)
			var trips atomic.Int64
			c.AddHook(countTrips{&trips})
			d, err := New(c, WithPrefix("set-"+randomHex(4)), WithFencing(fencing))
			if err != nil {
				t.Fatal(err)
			}
			lk := lock.New(d)
			defer lk.Close()
			// The inbox's connection (which the first lock held would
			// open) is dialled first; then the first set loads the script
			// and reads the server's run_id.
			if err := d.subscribe(ctx); err != nil {
				t.Fatal(err)
			}
			warm, err := lk.AcquireAll(ctx, []string{"warm/1", "warm/2"})
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			before := trips.Load()
			s, err := lk.AcquireAll(ctx, []string{"d", "c", "b", "a"})
			if err != nil {
				t.Fatal(err)
			}
			if n := trips.Load() - before; n != 1 {
				t.Errorf("AcquireAll of four free keys made %d round trips, want 1", n)
			}
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}

			reqs := setReqs(time.Minute, "a", "b", "c", "d")
			gs, err := d.TryAcquireSet(ctx, reqs)
			if err != nil || len(gs) != len(reqs) {
				t.Fatalf("TryAcquireSet of four free keys = %v, %v", gs, err)
			}
			for i, req := range reqs {
				if fencing == (gs[i].Token == 0) {
					t.Errorf("%s: token %d with fencing=%v", req.Key, gs[i].Token, fencing)
				}
				in, err := d.Inspect(ctx, req.Key)
				if err != nil || len(in.Holders) != 1 {
					t.Fatalf("Inspect(%q) = %+v, %v, want one holder", req.Key, in, err)
				}
				if h := in.Holders[0]; h.Owner != req.Owner || h.Label != req.Label || h.Token != gs[i].Token {
					t.Errorf("Inspect(%q) holder = %+v, want owner %s, label %q, token %d", req.Key, h, req.Owner, req.Label, gs[i].Token)
				}
				if err := d.Refresh(ctx, req); err != nil {
					t.Errorf("Refresh(%q): %v", req.Key, err)
				}
				if err := d.Release(ctx, req); err != nil {
					t.Errorf("Release(%q): %v", req.Key, err)
				}
				if err := d.Release(ctx, req); !errors.Is(err, driver.ErrNotHeld) {
					t.Errorf("Release(%q) again = %v, want ErrNotHeld", req.Key, err)
				}
			}
		})
	}
}

// A set with one key held elsewhere is refused as ErrLocked, and the free
// keys are left as they were: not one of their keys was written.
func TestASetWithOneHeldKeyTakesNothing(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	prefix := "set-" + randomHex(4)
	d, other := setDriver(t, url, prefix), setDriver(t, url, prefix)
	if _, err := other.TryAcquire(ctx, setReqs(time.Minute, "c")[0]); err != nil {
		t.Fatal(err)
	}
	if gs, err := d.TryAcquireSet(ctx, setReqs(time.Minute, "a", "b", "c", "d")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("TryAcquireSet with c held elsewhere = %v, %v, want ErrLocked", gs, err)
	}
	for _, k := range []string{"a", "b", "d"} {
		untouched(t, ctx, admin, d, k)
	}
}

// A free key whose queue holds a live waiter (the holder's lock vanished
// before the waiter looked again) is the waiter's: a set is not granted past
// it, and takes nothing else either.
func TestASetIsNotGrantedPastAKeysWaiters(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	prefix := "set-" + randomHex(4)
	d, holder, w := setDriver(t, url, prefix), setDriver(t, url, prefix), setDriver(t, url, prefix)
	if _, err := holder.TryAcquire(ctx, setReqs(time.Minute, "b")[0]); err != nil {
		t.Fatal(err)
	}
	// The waiter looks again when the holder's TTL ends or a third of its
	// lease (of its TTL: 10s) has passed, unless told of a handoff: the
	// deletion below tells it nothing.
	wctx, wcancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := w.Acquire(wctx, setReqs(30*time.Second, "b")[0])
		waited <- err
	}()
	k := d.keys("b")
	waitFor(t, ctx, "the waiter to join b's queue", func() bool { return admin.LLen(ctx, k.Queue).Val() == 1 })
	if err := admin.Del(ctx, k.Lock).Err(); err != nil {
		t.Fatal(err)
	}
	gs, err := d.TryAcquireSet(ctx, setReqs(time.Minute, "a", "b"))
	if !errors.Is(err, driver.ErrLocked) {
		t.Errorf("TryAcquireSet with b free but waited for = %v, %v, want ErrLocked", gs, err)
	}
	untouched(t, ctx, admin, d, "a")
	if n := admin.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Errorf("b's lock key exists after the refused set; the waiter has not looked again")
	}
	wcancel()
	select {
	case err := <-waited:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the waiter's Acquire = %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter's Acquire did not end with its context")
	}
}

// Sets of shared holds and of permits follow the queueing rule of a single
// request: shared holders are joined, a waiting writer is not passed; a
// semaphore with a permit free gives one, a full one refuses the set.
func TestASetTakesSharedHoldsAndPermitsByTheQueueRule(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	prefix := "set-" + randomHex(4)
	d, holder, w := setDriver(t, url, prefix), setDriver(t, url, prefix), setDriver(t, url, prefix)
	shaped := func(shared bool, permits int, keys ...string) []*driver.Request {
		reqs := setReqs(time.Minute, keys...)
		for _, r := range reqs {
			r.Shared, r.Permits = shared, permits
		}
		return reqs
	}
	for _, r := range append(shaped(true, 0, "r/held", "r/writer"), shaped(false, 2, "s/one", "s/full", "s/full")...) {
		if _, err := holder.TryAcquire(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := w.Acquire(wctx, setReqs(time.Minute, "r/writer")[0])
		waited <- err
	}()
	waitFor(t, ctx, "the writer to queue", func() bool { return admin.LLen(ctx, d.keys("r/writer").Queue).Val() == 1 })

	gs, err := d.TryAcquireSet(ctx, shaped(true, 0, "r/free", "r/held"))
	if err != nil || len(gs) != 2 || gs[0].Token == 0 || gs[1].Token == 0 {
		t.Errorf("a shared set over a key held shared = %v, %v, want both granted with tokens", gs, err)
	}
	if gs, err := d.TryAcquireSet(ctx, shaped(true, 0, "r/other", "r/writer")); !errors.Is(err, driver.ErrLocked) {
		t.Errorf("a shared set over a key a writer waits for = %v, %v, want ErrLocked", gs, err)
	}
	untouched(t, ctx, admin, d, "r/other")
	if gs, err := d.TryAcquireSet(ctx, shaped(false, 2, "s/free", "s/one")); err != nil || len(gs) != 2 {
		t.Errorf("a set of permits with one free on each key = %v, %v, want both granted", gs, err)
	}
	if gs, err := d.TryAcquireSet(ctx, shaped(false, 2, "s/full", "s/other")); !errors.Is(err, driver.ErrLocked) {
		t.Errorf("a set of permits over a full semaphore = %v, %v, want ErrLocked", gs, err)
	}
	untouched(t, ctx, admin, d, "s/other")
	wcancel()
	<-waited
}

// sameSlotKeys returns n keys whose locks under d's prefix are in one Cluster
// hash slot, in byte order. The escaping of a user's key leaves no hash tag
// of its own, so they are found by their slots.
func sameSlotKeys(d *Driver, n int) []string {
	slot := redisproto.Slot(redislayout.LockKey(d.prefix, "slot/0"))
	keys := []string{"slot/0"}
	for i := 1; len(keys) < n; i++ {
		if k := fmt.Sprintf("slot/%d", i); redisproto.Slot(redislayout.LockKey(d.prefix, k)) == slot {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// On a Cluster, a set whose locks share a hash slot is taken in one request;
// a set over several slots is ErrUnsupported and takes nothing (package lock
// then takes its keys one at a time).
func TestOnClusterASetInOneSlotIsOneRequestAndAcrossSlotsUnsupported(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var trips atomic.Int64
	d.client.AddHook(countTrips{&trips})

	spread := setReqs(time.Minute, "x", "y")
	if redisproto.Slot(d.keys("x").Lock) == redisproto.Slot(d.keys("y").Lock) {
		t.Fatal("x and y share a slot; the test needs keys of two slots")
	}
	if gs, err := d.TryAcquireSet(ctx, spread); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("TryAcquireSet over two slots = %v, %v, want ErrUnsupported", gs, err)
	}
	for _, r := range spread {
		if _, err := d.TryAcquire(ctx, r); err != nil {
			t.Errorf("TryAcquire(%q) after the unsupported set: %v, want it free", r.Key, err)
		}
	}

	keys := sameSlotKeys(d, 4)
	for round := 0; round < 2; round++ { // the first loads the script and reads the node's run_id
		reqs := setReqs(time.Minute, keys...)
		before := trips.Load()
		gs, err := d.TryAcquireSet(ctx, reqs)
		if err != nil || len(gs) != len(keys) {
			t.Fatalf("TryAcquireSet of %q, in one slot = %v, %v", keys, gs, err)
		}
		if n := trips.Load() - before; round == 1 && n != 1 {
			t.Errorf("TryAcquireSet of four keys in one slot made %d round trips, want 1", n)
		}
		for i, r := range reqs {
			if gs[i].Token == 0 {
				t.Errorf("%s: no token", r.Key)
			}
			if err := d.Release(ctx, r); err != nil {
				t.Errorf("Release(%q): %v", r.Key, err)
			}
		}
	}
}
