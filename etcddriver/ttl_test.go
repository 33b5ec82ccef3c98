package etcddriver_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
)

// Capabilities().MaxTTL is what package lock accepts, 366 days, shorter than
// etcd's own maximum lease TTL (9,000,000,000 s), the longest lease the
// driver can ask for.
func TestMaxTTLIsWhatPackageLockAccepts(t *testing.T) {
	d := newDriver(t, testserverEtcd(t), etcddriver.WithMinTTL(2*time.Second))
	if got := d.Capabilities().MaxTTL; got != driver.DefaultMaxTTL {
		t.Fatalf("MaxTTL = %v, want %v", got, driver.DefaultMaxTTL)
	}
	if etcddriver.MaxLeaseTTL != time.Duration(clientv3.MaxLeaseTTL)*time.Second {
		t.Fatalf("the driver's longest lease is %v, want etcd's maximum lease TTL %v", etcddriver.MaxLeaseTTL, time.Duration(clientv3.MaxLeaseTTL)*time.Second)
	}
}

// A TTL beyond etcd's maximum lease TTL, up to the largest time.Duration, is
// refused by the driver itself with an error that names the limit (not, by an
// overflow, as something unsupported), and takes nothing: no lease, no key.
func TestTTLBeyondTheMaximumIsAClearErrorAndTakesNothing(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	admin := newClient(t, url)
	maxTTL := etcddriver.MaxLeaseTTL
	for _, ttl := range []time.Duration{maxTTL + time.Nanosecond, maxTTL + time.Second, math.MaxInt64 - time.Second + 1, math.MaxInt64} {
		for _, wait := range []bool{false, true} {
			req := &driver.Request{Key: "k", Owner: "o", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
			var err error
			if wait {
				_, err = d.Acquire(ctx, req)
			} else {
				_, err = d.TryAcquire(ctx, req)
			}
			switch {
			case err == nil:
				t.Fatalf("TTL %d ns (wait %v): acquired", int64(ttl), wait)
			case errors.Is(err, driver.ErrUnsupported), errors.Is(err, driver.ErrUnavailable):
				t.Errorf("TTL %d ns (wait %v): %v; want a permanent error about the TTL, neither unsupported nor unavailable", int64(ttl), wait, err)
			case !strings.Contains(err.Error(), "maximum lease TTL") || !strings.Contains(err.Error(), maxTTL.String()):
				t.Errorf("TTL %d ns (wait %v): %q does not name the maximum %v", int64(ttl), wait, err, maxTTL)
			}
		}
	}
	if leases := d.Leases(); len(leases) != 0 {
		t.Errorf("leases %v kept after refused TTLs", leases)
	}
	resp, err := admin.Get(ctx, testPrefix(t)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d keys written for refused TTLs", resp.Count)
	}

	// Through the portable layer the largest Duration fails too, takes nothing,
	// and is never classed as a missing capability.
	a, _ := newLocker(t, url)
	if _, err := a.TryAcquire(ctx, "k", lock.WithTTL(math.MaxInt64)); err == nil || errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Locker.TryAcquire with TTL MaxInt64 = %v, want an error that is not ErrUnsupported", err)
	}
	b, _ := newLocker(t, url)
	l, err := b.TryAcquire(ctx, "k", lock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("the key after a refused huge TTL: %v", err)
	}
	_ = l.Release(ctx)
}

// The longest TTLs are granted as asked: the lease is the TTL rounded up to whole
// seconds, up to etcd's maximum exactly, and such locks release normally.
func TestLongestTTLsAreGrantedExactly(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	admin := newClient(t, url)
	maxTTL := etcddriver.MaxLeaseTTL
	for _, c := range []struct {
		ttl  time.Duration
		secs int64
	}{
		{maxTTL, clientv3.MaxLeaseTTL},
		{maxTTL - time.Second + 1, clientv3.MaxLeaseTTL},
		{driver.DefaultMaxTTL, int64(driver.DefaultMaxTTL / time.Second)},
		{driver.DefaultMaxTTL - time.Nanosecond, int64(driver.DefaultMaxTTL / time.Second)},
	} {
		req := &driver.Request{Key: "k", Owner: "o", TTL: c.ttl, Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, req); err != nil {
			t.Fatalf("TTL %v: %v", c.ttl, err)
		}
		var granted int64 = -1
		for _, id := range d.Leases() {
			ttl, err := admin.TimeToLive(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if ttl.GrantedTTL == c.secs {
				granted = ttl.GrantedTTL
			}
		}
		if granted != c.secs {
			t.Errorf("TTL %v: no lease of %ds among %v", c.ttl, c.secs, d.Leases())
		}
		if err := d.Release(ctx, req); err != nil {
			t.Fatalf("TTL %v: Release: %v", c.ttl, err)
		}
	}
}
