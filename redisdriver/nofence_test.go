package redisdriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// The fencing parameter is this driver's (go-redis never sees it), true when
// not given, on every scheme; a bad or repeated value is refused.
func TestFencingParameterIsReadOnEveryScheme(t *testing.T) {
	for raw, want := range map[string]bool{
		"redis://h:1/0": true,
		"redis://h:1/0?fencing=true&dial_timeout=1s":       true,
		"redis://h:1/0?fencing=false":                      false,
		"rediss://h:1/0?fencing=0":                         false,
		"redis+unix:///tmp/r.sock?fencing=false&db=1":      false,
		"redis+sentinel://s:1?master_name=m&fencing=false": false,
		"redis+cluster://n:1?addr=n2:1&fencing=false":      false,
	} {
		o, err := parseURL(mustParse(t, raw))
		if err != nil || o.fencing != want {
			t.Errorf("%s: fencing %v, %v; want %v", raw, o.fencing, err, want)
		}
	}
	for _, raw := range []string{"redis://h:1/0?fencing=maybe", "redis://h:1/0?fencing=false&fencing=true"} {
		if _, err := parseURL(mustParse(t, raw)); !errors.Is(err, driver.ErrInvalidURL) || !strings.Contains(err.Error(), "fencing") {
			t.Errorf("%s: %v, want ErrInvalidURL naming fencing", raw, err)
		}
	}
}

// Without fencing an uncontended TryAcquire is the standard pattern's single
// SET NX PX (1 server command, no script: watchers hear of it by the
// server's tracking of the key, see Watch), the lock's value carries the owner, a NUL and the
// label, and nothing is written beside it; no token is reported, Inspect,
// Relabel, refresh and release read the value, and a waiter handed the lock
// gets no token either.
func TestWithoutFencingTryAcquireIsOneSetAndTheValueCarriesTheLabel(t *testing.T) {
	ctx, admin, d := privatePlainDriver(t)
	if d.Capabilities().Fencing {
		t.Fatal("fencing=false: Capabilities().Fencing is true")
	}
	req := &driver.Request{Key: "plain", Owner: randomHex(8), TTL: 10 * time.Second, Label: `{"owner":"me"}`, Lost: driver.LostFunc(func(error) {})}
	k := d.keys(req.Key)
	if _, err := d.TryAcquire(ctx, req); err != nil { // reads the run_id
		t.Fatal(err)
	}
	if err := d.Release(ctx, req); err != nil { // loads the script
		t.Fatal(err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g, err := d.TryAcquire(ctx, req)
	if err != nil || g.Token != 0 {
		t.Fatalf("TryAcquire = %+v, %v; want token 0", g, err)
	}
	acquired, scripts, err := serverCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if acquired-1 != 1 || scripts != 0 { // CONFIG RESETSTAT counts itself
		t.Errorf("an uncontended acquire ran %d commands on the server (%d scripts), want 1 (SET NX PX) and no script", acquired-1, scripts)
	}
	if v := admin.Get(ctx, k.Lock).Val(); v != req.Owner+"\x00"+req.Label {
		t.Errorf("lock key %q, want the owner, a NUL and the label", v)
	}
	if n := admin.Exists(ctx, k.Fence, k.Queue, k.Waiters, k.Holders, k.Labels).Val(); n != 0 {
		t.Errorf("%d keys written beside the lock, want none", n)
	}
	in, err := d.Inspect(ctx, req.Key)
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Label != req.Label || in.Holders[0].Owner != req.Owner || in.Token != 0 {
		t.Errorf("Inspect = %+v, %v; want the holder with its label and no token", in, err)
	}
	// A retry after a lost reply finds the lock ours.
	if g, err := d.TryAcquire(ctx, req); err != nil || g.Token != 0 {
		t.Errorf("TryAcquire again by the owner = %+v, %v; want the same grant", g, err)
	}
	other := &driver.Request{Key: req.Key, Owner: randomHex(8), TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, other); !errors.Is(err, driver.ErrLocked) {
		t.Errorf("TryAcquire by another owner = %v, want ErrLocked", err)
	}
	if err := d.Relabel(ctx, req, "relabelled"); err != nil {
		t.Fatal(err)
	}
	if v := admin.Get(ctx, k.Lock).Val(); v != req.Owner+"\x00relabelled" {
		t.Errorf("lock key after Relabel %q, want the owner, a NUL and the new label", v)
	}
	if pt := admin.PTTL(ctx, k.Lock).Val(); pt <= 0 {
		t.Errorf("Relabel lost the TTL: %v", pt)
	}
	if err := d.Refresh(ctx, req); err != nil { // loads the script, extends nothing else
		t.Fatal(err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(ctx, req); err != nil {
		t.Fatal(err)
	}
	refreshed, _, err := serverCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if refreshed-1 != 3 { // EVALSHA, GETEX, INFO
		t.Errorf("a refresh ran %d commands on the server, want 3 (EVALSHA, GETEX, INFO): no fence record to extend", refreshed-1)
	}
	if err := d.Release(ctx, other); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Release by another owner = %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Error("the lock key outlived its release")
	}
	// A waiter handed the lock gets no token either.
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	w := &driver.Request{Key: req.Key, Owner: randomHex(8), TTL: 10 * time.Second, Label: "w", Lost: driver.LostFunc(func(error) {})}
	got := make(chan driver.Grant, 1)
	go func() {
		g, err := d.Acquire(ctx, w)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	waitFor(t, ctx, "the waiter to queue", func() bool { return admin.LLen(ctx, k.Queue).Val() == 1 })
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.Token != 0 {
		t.Errorf("handoff without fencing: token %d, want 0", g.Token)
	}
	if in, err := d.Inspect(ctx, req.Key); err != nil || len(in.Holders) != 1 || in.Holders[0].Owner != w.Owner || in.Holders[0].Label != "w" {
		t.Errorf("Inspect after the handoff = %+v, %v; want the waiter with its label", in, err)
	}
	if err := d.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
}

// Without fencing an uncontended Acquire (the blocking call, whose first try
// must not pass a queued waiter) is one script of two commands: one EXISTS
// asks at once whether anyone queues or watches, then SET NX PX. Its release
// is the compare-and-delete with one EXISTS more (GET, DEL, EXISTS).
func TestWithoutFencingAnUncontendedAcquireRunsTwoCommandsInItsScript(t *testing.T) {
	ctx, admin, d := privatePlainDriver(t)
	req := &driver.Request{Key: "plain", Owner: randomHex(8), TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})}
	// The first round loads the scripts and reads the run_id.
	if _, err := d.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		run  func() error
		want int64 // commands, the script call included
	}{
		{"Acquire", func() error { _, err := d.Acquire(ctx, req); return err }, 3},
		{"Release", func() error { return d.Release(ctx, req) }, 4},
	} {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := step.run(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		calls, scripts, err := serverCalls(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		calls-- // CONFIG RESETSTAT counts itself
		if calls != step.want || scripts != 1 {
			t.Errorf("an uncontended %s ran %d commands on the server (%d scripts), want %d in one script", step.name, calls, scripts, step.want)
		}
	}
}

// A standard SET NX client (bsm/redislock's pattern: a value of its own,
// compare-and-delete to release) and the driver without fencing exclude each
// other on the same key, and neither's release or refresh frees the other's
// lock.
func TestWithoutFencingAStandardClientAndTheDriverExcludeEachOther(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	d, err := New(adminClient(t, url), WithPrefix("plain-"+randomHex(4)), WithFencing(false))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := &driver.Request{Key: "shared-with-redislock", Owner: randomHex(8), TTL: 10 * time.Second, Label: "ours", Lost: driver.LostFunc(func(error) {})}
	k := d.keys(req.Key)
	theirs := "tok3nFromAnotherLibrary" + "meta"

	// Theirs first: ours is refused, and our release, refresh and
	// ForceRelease-free calls leave it.
	if ok := admin.SetNX(ctx, k.Lock, theirs, 10*time.Second).Val(); !ok {
		t.Fatal("the standard client's SET NX failed on a free key")
	}
	if _, err := d.TryAcquire(ctx, req); !errors.Is(err, driver.ErrLocked) {
		t.Errorf("TryAcquire while the standard client holds the key = %v, want ErrLocked", err)
	}
	actx, acancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := d.Acquire(actx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire while the standard client holds the key = %v, want it to wait until its deadline", err)
	}
	acancel()
	if err := d.Release(ctx, req); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Release = %v, want ErrNotHeld", err)
	}
	if err := d.Refresh(ctx, req); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Refresh = %v, want ErrNotHeld", err)
	}
	if v := admin.Get(ctx, k.Lock).Val(); v != theirs {
		t.Fatalf("the standard client's lock became %q", v)
	}
	if in, err := d.Inspect(ctx, req.Key); err != nil || len(in.Holders) != 1 || in.Holders[0].Owner != theirs {
		t.Errorf("Inspect = %+v, %v; want the standard client's value as the holder", in, err)
	}
	if n, err := rawRelease.Run(ctx, admin, []string{k.Lock}, theirs).Int(); err != nil || n != 1 {
		t.Fatalf("the standard client's release = %v, %v", n, err)
	}

	// Ours first: theirs is refused, and their compare-and-delete with their
	// value leaves ours.
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ok := admin.SetNX(ctx, k.Lock, theirs, 10*time.Second).Val(); ok {
		t.Error("the standard client's SET NX took the key the driver holds")
	}
	if n, err := rawRelease.Run(ctx, admin, []string{k.Lock}, theirs).Int(); err != nil || n != 0 {
		t.Errorf("the standard client's release of our lock = %v, %v; want 0", n, err)
	}
	if err := d.Refresh(ctx, req); err != nil {
		t.Errorf("Refresh after the standard client's attempts: %v", err)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ok := admin.SetNX(ctx, k.Lock, theirs, 10*time.Second).Val(); !ok {
		t.Error("the standard client's SET NX failed after our release")
	}
	_ = admin.Del(ctx, k.Lock)
}

// A TryAcquire's single SET NX never passes a waiter the lock is handed to:
// the release hands the key to the head of the queue in the same script, so
// it is never free while a live waiter queues. A newcomer trying all the
// while wins only after the waiter released.
func TestWithoutFencingATryingNewcomerNeverPassesAHandoff(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	prefix := "plain-" + randomHex(4)
	open := func() *Driver {
		d, err := New(adminClient(t, url), WithPrefix(prefix), WithFencing(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	holderD, waiterD, newcomerD := open(), open(), open()
	for round := 0; round < 20; round++ {
		holder := &driver.Request{Key: "fifo", Owner: randomHex(8), TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})}
		waiter := &driver.Request{Key: "fifo", Owner: randomHex(8), TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})}
		k := holderD.keys("fifo")
		if _, err := holderD.TryAcquire(ctx, holder); err != nil {
			t.Fatal(err)
		}
		granted := make(chan error, 1)
		go func() {
			_, err := waiterD.Acquire(ctx, waiter)
			granted <- err
		}()
		waitFor(t, ctx, "the waiter to queue", func() bool { return admin.LLen(ctx, k.Queue).Val() == 1 })
		stop := make(chan struct{})
		won := make(chan *driver.Request, 1)
		tried := make(chan int, 1)
		refused := make(chan struct{}) // closed at the newcomer's first refusal
		go func() {
			n := 0
			defer func() { tried <- n }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := &driver.Request{Key: "fifo", Owner: randomHex(8), TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})}
				n++
				_, err := newcomerD.TryAcquire(ctx, r)
				if err == nil {
					won <- r
					return
				}
				if n == 1 {
					close(refused)
				}
			}
		}()
		<-refused
		if err := holderD.Release(ctx, holder); err != nil {
			t.Fatal(err)
		}
		if err := <-granted; err != nil {
			t.Fatalf("the waiter's Acquire: %v", err)
		}
		close(stop)
		<-tried
		select {
		case r := <-won:
			_ = newcomerD.Release(ctx, r)
			t.Fatalf("round %d: a newcomer's TryAcquire took the lock before the waiter released it", round)
		default:
		}
		if v := admin.Get(ctx, k.Lock).Val(); v != waiter.Owner {
			t.Fatalf("round %d: the lock holds %q, want the waiter", round, v)
		}
		if err := waiterD.Release(ctx, waiter); err != nil {
			t.Fatal(err)
		}
	}
}

// A watched key's watchers are told of a grant by TryAcquire's single SET
// NX too.
func TestWithoutFencingWatchersAreToldOfATryAcquireGrant(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := New(adminClient(t, url), WithPrefix("plain-"+randomHex(4)), WithFencing(false))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	c, err := d.Watch(wctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	req := &driver.Request{Key: "watched", Owner: randomHex(8), TTL: 10 * time.Second, Label: "x", Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c:
	case <-ctx.Done():
		t.Fatal("no signal of the grant")
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c:
	case <-ctx.Done():
		t.Fatal("no signal of the release")
	}
	wcancel()
	for range c {
	}
}

// A watch outside a Cluster hears of every change of the lock key on the
// server, also those no script announces: a grant and a release by a
// standard SET NX client, and the expiry of a lock.
func TestWatchHearsOfStandardClientsAndExpiries(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	d, err := New(adminClient(t, url), WithPrefix("plain-"+randomHex(4)), WithFencing(false))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	c, err := d.Watch(wctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	k := d.keys("watched")
	// Drains a signal that may be pending (spurious ones are allowed), then
	// makes the change and waits for a signal after it.
	hears := func(what string, change func()) {
		t.Helper()
		select {
		case <-c:
		default:
		}
		change()
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatalf("no signal of %s", what)
		}
	}
	hears("a standard client's grant", func() {
		if err := admin.SetNX(ctx, k.Lock, "standard", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	})
	hears("a standard client's release", func() {
		if err := admin.Del(ctx, k.Lock).Err(); err != nil {
			t.Fatal(err)
		}
	})
	// The expiry is the server's own: nobody touches the key after the SET.
	// A signal received while the key still exists is the grant's; the
	// next one must come once it has expired.
	for {
		select {
		case <-c:
		default:
		}
		if err := admin.SetNX(ctx, k.Lock, "standard", 300*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatal("no signal of the grant")
		}
		if admin.Exists(ctx, k.Lock).Val() == 0 {
			continue // too slow to tell the grant's signal from the expiry's: again
		}
		break
	}
	for admin.Exists(ctx, k.Lock).Val() != 0 {
		select {
		case <-c: // a signal before the expiry is allowed; wait for another
		case <-ctx.Done():
			t.Fatal("no signal of the expiry")
		}
	}
	wcancel()
	for range c {
	}
}

// A watch tracks its key again on the connection go-redis dials after a
// restart of the server, before it subscribes again: the server then has a
// broadcasting tracker for the key redirected to itself and subscribed to
// the invalidations, and a TryAcquire without fencing signals.
func TestWatchTracksAgainAfterARestart(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, srv.URL()+"?fencing=false")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	c, err := d.Watch(wctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(false); err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, srv.URL())
	waitFor(t, ctx, "a tracker redirected to itself and subscribed", func() bool {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			return false
		}
		for _, line := range strings.Split(list, "\n") {
			f := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			if strings.Contains(f["flags"], "t") && strings.Contains(f["flags"], "B") && f["redir"] == f["id"] && f["sub"] == "2" {
				return true
			}
		}
		return false
	})
	req := &driver.Request{Key: "watched", Owner: randomHex(8), TTL: 10 * time.Second, Label: "x", Lost: driver.LostFunc(func(error) {})}
	select {
	case <-c: // the signal of the reconnection, if not read yet
	default:
	}
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c:
	case <-ctx.Done():
		t.Fatal("no signal of the grant after the restart")
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	wcancel()
	for range c {
	}
}

// privatePlainDriver starts a Redis of the test's own (so that its command
// counts are the test's alone) and returns a context, an admin client and a
// driver without fencing on it, whose inbox (which the first grant would
// start) is subscribed already.
func privatePlainDriver(t *testing.T) (context.Context, *redis.Client, *Driver) {
	t.Helper()
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	admin := adminClient(t, srv.URL())
	d, err := openURL(ctx, srv.URL()+"?fencing=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, admin, d
}
