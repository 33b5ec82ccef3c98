package redisdriver

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// TestEveryCallWorksAfterTheServerForgetsItsScripts: a server that forgot
// the scripts (SCRIPT FLUSH, as a restart or a failover to a replica does)
// answers EVALSHA with NOSCRIPT, and the driver then sends the script itself,
// on the uncontended path of each form of acquire (try, first try of a
// waiting Acquire) and of release.
func TestEveryCallWorksAfterTheServerForgetsItsScripts(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, srv.URL())
	d, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	acquires := map[string]func(context.Context, *driver.Request) (driver.Grant, error){
		"TryAcquire": d.TryAcquire,
		"Acquire":    d.Acquire,
	}
	var last uint64
	for name, acquire := range acquires {
		req := &driver.Request{Key: "forgotten-" + name, Owner: randomHex(16), TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		g, err := acquire(ctx, req)
		if err != nil {
			t.Fatalf("%s after SCRIPT FLUSH: %v", name, err)
		}
		if g.Token <= last {
			t.Fatalf("%s after SCRIPT FLUSH: token %d, want more than %d", name, g.Token, last)
		}
		last = g.Token
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, req); err != nil {
			t.Fatalf("Release after SCRIPT FLUSH: %v", err)
		}
		if n, err := admin.Exists(ctx, d.keys(req.Key).Lock).Result(); err != nil || n != 0 {
			t.Fatalf("the lock key after Release: EXISTS = %d, %v; want 0", n, err)
		}
	}
}

// TestATokenAheadOfTheClockStillRecordsTheHolder: when the last token is
// ahead of the server's clock (another server's clock ran ahead), the grant's
// token is one more than it, and the holder's record in the fence record is
// written with that token, the grant's time and the label, as on the usual
// path.
func TestATokenAheadOfTheClockStillRecordsTheHolder(t *testing.T) {
	d, admin, ctx := newInspectDriver(t)
	k := d.keys("ahead")
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := admin.Set(ctx, k.Fence, ahead, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	req := &driver.Request{Key: "ahead", Owner: randomHex(16), TTL: 3 * time.Second, Label: "a label"}
	before := time.Now()
	g, err := d.TryAcquire(ctx, req)
	if err != nil || g.Token != ahead+1 {
		t.Fatalf("TryAcquire = %+v, %v; want token %d", g, err, ahead+1)
	}
	in, err := d.Inspect(ctx, "ahead")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Holders) != 1 || in.Token != g.Token {
		t.Fatalf("Inspect = %+v, want one holder and token %d", in, g.Token)
	}
	h := in.Holders[0]
	if h.Owner != req.Owner || h.Label != req.Label || h.Token != g.Token {
		t.Errorf("holder %+v, want owner %s, label %q, token %d", h, req.Owner, req.Label, g.Token)
	}
	if h.Since.Before(before.Add(-time.Second)) || h.Since.After(time.Now().Add(time.Second)) {
		t.Errorf("Since %v, not the grant's time (%v)", h.Since, before)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	g, err = d.Acquire(ctx, req)
	if err != nil || g.Token != ahead+2 {
		t.Fatalf("Acquire = %+v, %v; want token %d", g, err, ahead+2)
	}
}
