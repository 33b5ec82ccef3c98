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
	if err := admin.RPush(ctx, d2.keys("list").lock, "x").Err(); err != nil {
		t.Fatal(err)
	}
	wrong := &driver.Request{Key: "list", Owner: "owner-1", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d2.TryAcquire(ctx, wrong); !errors.Is(err, ErrWrongType) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("TryAcquire of a list = %v, want a permanent ErrWrongType", err)
	}
}
