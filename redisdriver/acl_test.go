package redisdriver

import (
	"context"
	"errors"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// aclRules are the permissions docs/backends/redis.md (Requirements) says a user needs
// for the prefix "app" (HELLO needs none; CLIENT SETNAME is only sent with
// the client_name parameter), with Inspect, List, ForceRelease, Relabel and
// Watch.
var aclRules = []string{
	"on", ">pw", "resetkeys", "resetchannels", "~app:*", "&app:inbox:*", "&app:{*}:watch", "&__redis__:invalidate", "-@all",
	"+evalsha", "+eval", "+info", "+ping", "+subscribe",
	// Watch's tracking connection
	"+client|id", "+client|tracking",
	// called by the scripts
	"+set", "+get", "+getex", "+del", "+exists", "+time", "+pttl", "+pexpire", "+publish",
	"+llen", "+lindex", "+lpop", "+rpush", "+lrem", "+hget", "+hset", "+hdel",
	"+pexpireat", "+lrange", "+zadd", "+zrem", "+zscore", "+zcard", "+zrange", "+zremrangebyscore",
	"+zrangebyscore", "+type", "+hexists",
	// List
	"+scan",
}

// A user with only the documented permissions, limited to the prefix, can lock,
// wait and refresh, with every shape; outside the prefix it is refused with the server's NOPERM.
func TestDocumentedACLIsEnough(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, srv.URL())
	args := []any{"ACL", "SETUSER", "locker"}
	for _, r := range aclRules {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(srv.URL(), "redis://", "redis://locker:pw@", 1)
	a, err := lock.Open(ctx, url+"?prefix=app", lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := lock.Open(ctx, url+"?prefix=app", lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	l, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := b.Acquire(ctx, "k")
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	waitQueueLen(t, ctx, admin, "app:{k}:queue", 1)
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}

	// A shared hold (a writer waiting behind it) and a semaphore of two (a
	// third permit waiting), each handed over on release.
	for _, c := range []struct {
		key        string
		hold, wait lock.Option
	}{
		{"s", lock.WithShared(true), lock.WithShared(false)},
		{"p", lock.WithPermits(2), lock.WithPermits(2)},
	} {
		h1, err := a.Acquire(ctx, c.key, c.hold)
		if err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		h2, err := a.TryAcquire(ctx, c.key, c.hold)
		if err != nil {
			t.Fatalf("%s: second holder: %v", c.key, err)
		}
		go func() {
			l, err := b.Acquire(ctx, c.key, c.wait)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitQueueLen(t, ctx, admin, "app:{"+c.key+"}:queue", 1)
		if err := h1.Refresh(ctx); err != nil {
			t.Fatalf("%s: Refresh: %v", c.key, err)
		}
		for _, h := range []*lock.Lock{h1, h2} {
			if err := h.Release(ctx); err != nil {
				t.Fatalf("%s: Release: %v", c.key, err)
			}
		}
		if err := <-got; err != nil {
			t.Fatalf("%s: waiter: %v", c.key, err)
		}
	}

	// Inspection and operators' calls: a leader (Relabel), observed (Watch),
	// inspected, listed and evicted.
	obsCtx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	observed := b.Observe(obsCtx, "lead")
	if first := <-observed; first.Elected {
		t.Fatalf("Observe before any leader: %+v", first)
	}
	ld, err := a.Campaign(ctx, "lead", "v1")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if err := ld.Proclaim(ctx, "v2"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	for v := range observed {
		if v.Value == "v2" {
			break
		}
	}
	if in, err := b.Inspect(ctx, "lead"); err != nil || !in.Held || in.Token != ld.Token() {
		t.Fatalf("Inspect = %+v, %v", in, err)
	}
	if keys, err := b.List(ctx, ""); err != nil || len(keys) != 1 || keys[0] != "lead" {
		t.Fatalf("List = %q, %v", keys, err)
	}
	if err := b.ForceRelease(ctx, "lead"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if err := ld.Proclaim(ctx, "v3"); !errors.Is(err, lock.ErrForceReleased) {
		t.Fatalf("Proclaim after ForceRelease = %v, want ErrForceReleased", err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	dr, err := open(ctx, driver.Config{URL: u, Prefix: "app"})
	if err != nil {
		t.Fatal(err)
	}
	d := dr.(*Driver)
	defer d.Close()
	if _, err := d.Watch(ctx, "lead"); err != nil {
		t.Fatalf("Watch: %v", err)
	}

	outside, err := lock.Open(ctx, url+"?prefix=other", lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	if _, err := outside.TryAcquire(ctx, "k"); err == nil || !strings.Contains(err.Error(), "NOPERM") || errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire outside the permitted prefix = %v, want the server's NOPERM", err)
	}
}
