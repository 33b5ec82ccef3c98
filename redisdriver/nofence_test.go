package redisdriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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

// Without fencing the lock is the standard pattern's key and no token is
// reported; the holder's record (for Inspect) is written beside it without a
// token, so labels and Inspect work as with fencing; an uncontended acquire
// costs the server 4 commands (the script call included), against 5 with
// fencing (6 when the fence record is new), and a waiter handed the lock gets
// no token either.
func TestWithoutFencingTheLockIsPlainAndInspectKeepsTheLabel(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, srv.URL())
	d, err := openURL(ctx, srv.URL()+"?fencing=false")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Capabilities().Fencing {
		t.Fatal("fencing=false: Capabilities().Fencing is true")
	}
	if err := d.subscribe(ctx); err != nil { // the inbox, which the first grant would start
		t.Fatal(err)
	}
	req := &driver.Request{Key: "plain", Owner: randomHex(8), TTL: 10 * time.Second, Label: `{"owner":"me"}`, Lost: func(error) {}}
	k := d.keys(req.Key)
	if _, err := d.TryAcquire(ctx, req); err != nil { // loads the script, reads the run_id
		t.Fatal(err)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g, err := d.TryAcquire(ctx, req)
	if err != nil || g.Token != 0 {
		t.Fatalf("TryAcquire = %+v, %v; want token 0", g, err)
	}
	acquired, _, err := serverCalls(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if acquired-1 > 4 { // CONFIG RESETSTAT counts itself
		t.Errorf("an uncontended acquire ran %d commands on the server, want 4 (EVALSHA, SET NX PX, SET of the record, HGET of the watchers)", acquired-1)
	}
	if v := admin.Get(ctx, k.lock).Val(); v != req.Owner {
		t.Errorf("lock key %q, want the plain owner %q", v, req.Owner)
	}
	if rec := admin.Get(ctx, k.fence).Val(); rec != "0 0 "+req.Owner+" "+req.Label {
		t.Errorf("record %q, want no token, no time, the owner and the label", rec)
	}
	in, err := d.Inspect(ctx, req.Key)
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Label != req.Label || in.Holders[0].Owner != req.Owner || in.Token != 0 {
		t.Errorf("Inspect = %+v, %v; want the holder with its label and no token", in, err)
	}
	if err := d.Refresh(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	// A waiter handed the lock gets no token either.
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	w := &driver.Request{Key: req.Key, Owner: randomHex(8), TTL: 10 * time.Second, Label: "w", Lost: func(error) {}}
	got := make(chan driver.Grant, 1)
	go func() {
		g, err := d.Acquire(ctx, w)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	waitFor(t, ctx, "the waiter to queue", func() bool { return admin.LLen(ctx, k.queue).Val() == 1 })
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.Token != 0 {
		t.Errorf("handoff without fencing: token %d, want 0", g.Token)
	}
	_ = d.Release(ctx, w)
}
