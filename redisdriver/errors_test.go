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

// A server that became a replica (as the old primary does after a failover)
// refuses writes with READONLY until the client follows the new primary: a
// transient failure, so it matches driver.ErrUnavailable and package lock
// retries it, as it does a server that cannot be reached.
func TestReplicaAndStoppedServerAreUnavailable(t *testing.T) {
	primary := testserver.StartRedis(t)
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, srv.URL()+"?max_retries=-1")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	host, port, _ := strings.Cut(primary.Addr(), ":")
	admin := adminClient(t, srv.URL())
	if err := admin.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	req := &driver.Request{Key: "k", Owner: "owner-1", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	_, err = d.TryAcquire(ctx, req)
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("TryAcquire on a replica = %v, want READONLY matching driver.ErrUnavailable", err)
	}
	if _, err := d.Acquire(ctx, req); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Acquire on a replica = %v, want driver.ErrUnavailable", err)
	}
	if err := admin.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.TryAcquire(ctx, req); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("TryAcquire on a stopped server = %v, want driver.ErrUnavailable", err)
	}
	if err := d.Release(ctx, req); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Release on a stopped server = %v, want driver.ErrUnavailable", err)
	}
	if err := d.Refresh(ctx, req); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Refresh on a stopped server = %v, want driver.ErrUnavailable", err)
	}
}

// Answers that will not change by retrying stay permanent: a key of the wrong
// type, a missing permission.
func TestWrongTypeAndMissingPermissionArePermanent(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, srv.URL())
	if err := admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := openURL(ctx, strings.Replace(srv.URL(), "redis://", "redis://reader:pw@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := &driver.Request{Key: "k", Owner: "owner-1", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, req); err == nil || errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("TryAcquire without EVALSHA permission = %v, want a permanent NOPERM", err)
	}
	d2, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := admin.RPush(ctx, d2.keys("list").Lock, "x").Err(); err != nil {
		t.Fatal(err)
	}
	wrong := &driver.Request{Key: "list", Owner: "owner-1", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d2.TryAcquire(ctx, wrong); !errors.Is(err, ErrWrongType) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("TryAcquire of a list = %v, want a permanent ErrWrongType", err)
	}
}

// refusingUser starts a Redis of the test's own with a user "locker" that may
// run every command but command, and returns a context, an admin client and
// the URL that logs in as that user.
func refusingUser(t *testing.T, command string) (context.Context, *redis.Client, string) {
	t.Helper()
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	admin := adminClient(t, srv.URL())
	if err := admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-"+command).Err(); err != nil {
		t.Fatal(err)
	}
	return ctx, admin, strings.Replace(srv.URL(), "redis://", "redis://locker:pw@", 1)
}

// isRefusal reports whether err is the server's permanent refusal of a
// command. Redis 7.0 words a refusal inside a script "can't run this
// command", later versions NOPERM.
func isRefusal(err error) bool {
	return err != nil && !errors.Is(err, driver.ErrNotHeld) && !errors.Is(err, driver.ErrUnavailable) &&
		(strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't run this command"))
}

// A server refusing the refresh's GETEX (a user whose ACL lacks it) has said
// nothing about the lock: Refresh and a batched refresh fail with the
// server's refusal, permanent, and never report the lock as not held.
func TestRefreshWithoutGetexPermissionIsTheServersRefusalNotALoss(t *testing.T) {
	ctx, _, url := refusingUser(t, "getex")
	for _, fencing := range []string{"true", "false"} {
		d, err := openURL(ctx, url+"?fencing="+fencing)
		if err != nil {
			t.Fatal(err)
		}
		reqs := []*driver.Request{
			{Key: "a-" + fencing, Owner: "owner-1", TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})},
			{Key: "b-" + fencing, Owner: "owner-2", TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})},
		}
		for _, r := range reqs {
			if _, err := d.TryAcquire(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		check := func(what string, err error) {
			t.Helper()
			if !isRefusal(err) {
				t.Errorf("fencing=%s: %s without GETEX permission = %v, want the server's permanent refusal, not ErrNotHeld", fencing, what, err)
			}
		}
		check("Refresh", d.Refresh(ctx, reqs[0]))
		for i, err := range d.RefreshBatch(ctx, reqs) {
			check("RefreshBatch of "+reqs[i].Key, err)
		}
		for _, r := range reqs {
			if err := d.Release(ctx, r); err != nil {
				t.Errorf("fencing=%s: release %s: %v", fencing, r.Key, err)
			}
		}
		_ = d.Close()
	}
}

// A server refusing the release's GET has said nothing about the lock either:
// Release fails with the refusal, permanent, not ErrNotHeld, and the lock
// stays where it was.
func TestReleaseWithoutGetPermissionIsTheServersRefusalNotALoss(t *testing.T) {
	ctx, admin, url := refusingUser(t, "get")
	for _, fencing := range []string{"true", "false"} {
		d, err := openURL(ctx, url+"?fencing="+fencing)
		if err != nil {
			t.Fatal(err)
		}
		req := &driver.Request{Key: "k-" + fencing, Owner: "owner-1", TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, req); !isRefusal(err) {
			t.Errorf("fencing=%s: Release without GET permission = %v, want the server's permanent refusal, not ErrNotHeld", fencing, err)
		}
		if v := admin.Get(ctx, d.keys(req.Key).Lock).Val(); !strings.HasPrefix(v, req.Owner) {
			t.Errorf("fencing=%s: the lock key holds %q after the refused release, want the owner's lock still there", fencing, v)
		}
		_ = d.Close()
	}
}
