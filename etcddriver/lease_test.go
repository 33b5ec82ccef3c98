package etcddriver_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// Capabilities().MinTTL is what etcd grants for the shortest lease, and it
// follows the server's election timeout.
func TestMinTTLIsWhatTheServerGrants(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want time.Duration
	}{
		// etcd's minimum is 1.5 election timeouts rounded up to seconds.
		{"DefaultElectionTimeout", nil, 2 * time.Second},
		{"ElectionTimeout3s", []string{"--heartbeat-interval=300", "--election-timeout=3000"}, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testserver.StartEtcd(t, tc.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			admin := newClient(t, s.URL())
			g, err := admin.Grant(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			ttl, err := admin.TimeToLive(ctx, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			granted := time.Duration(ttl.GrantedTTL) * time.Second
			d := newDriver(t, s.URL())
			if got := d.Capabilities().MinTTL; got != granted || got != tc.want {
				t.Fatalf("MinTTL = %v; etcd granted %v for a 1s lease; want %v", got, granted, tc.want)
			}
			lk := lock.New(d)
			defer lk.Close()
			if _, err := lk.TryAcquire(ctx, "k", lock.WithTTL(granted-time.Second)); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("TryAcquire with a TTL below the minimum = %v, want ErrInvalidArgument", err)
			}
			l, err := lk.TryAcquire(ctx, "k", lock.WithTTL(granted))
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)
		})
	}
}

// A minimum declared too low is caught when etcd lengthens a lease: the
// acquisition fails rather than run on a lease longer than the holder believes.
func TestLeaseLengthenedByTheServerIsRefused(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := newDriver(t, url, etcddriver.WithMinTTL(time.Second), etcddriver.WithPrefix(testPrefix(t)))
	lk := lock.New(d)
	defer lk.Close()
	_, err := lk.TryAcquire(ctx, "k", lock.WithTTL(time.Second))
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("TryAcquire with a TTL etcd raises = %v, want ErrUnsupported", err)
	}
	t.Log(err)
	if n := len(d.Leases()); n != 0 {
		t.Errorf("%d leases kept after the refused grant", n)
	}
}

// Each distinct lease TTL (the lock TTL rounded up to seconds) has one lease,
// shared by all locks of that TTL; a lease that serves no lock for a whole TTL
// is revoked.
func TestOneLeasePerTTLRetiredWhenIdle(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, d := newLocker(t, url, lock.WithTTL(2*time.Second))
	admin := newClient(t, url)
	var held []*lock.Lock
	for _, c := range []struct {
		key string
		ttl time.Duration
	}{{"a", 2 * time.Second}, {"b", 2500 * time.Millisecond}, {"c", 3 * time.Second}, {"d", 2 * time.Second}} {
		l, err := lk.Acquire(ctx, c.key, lock.WithTTL(c.ttl))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	leases := d.Leases()
	var granted []int64
	for _, id := range leases {
		ttl, err := admin.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		granted = append(granted, ttl.GrantedTTL)
	}
	sort.Slice(granted, func(i, j int) bool { return granted[i] < granted[j] })
	if len(granted) != 2 || granted[0] != 2 || granted[1] != 3 {
		t.Fatalf("lease TTLs %v, want [2 3]", granted)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Retired after one idle TTL, noticed at the next keepalive tick.
	deadline := time.Now().Add(3*time.Second + 2*time.Second)
	for len(d.Leases()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("leases %v still kept after serving no lock for longer than their TTL", d.Leases())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The lease leaves Leases before its revoke, which runs in the background:
	// wait for it, for at most a second. Its last keepalive was at most a
	// third of its TTL (2s or 3s) ago, so it cannot have expired by itself
	// within that second: only the revoke ends it in time.
	revoked := time.Now().Add(time.Second)
	for _, id := range leases {
		for {
			ttl, err := admin.TimeToLive(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if ttl.TTL <= 0 {
				break
			}
			if time.Now().After(revoked) {
				t.Fatalf("idle lease %x not revoked (TTL %ds)", id, ttl.TTL)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// And the Locker still works, on a new lease.
	l := mustAcquire(t, lk, "a")
	_ = l.Release(ctx)
}
