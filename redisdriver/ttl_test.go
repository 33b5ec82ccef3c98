package redisdriver

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// The longest TTL a time.Duration holds reaches the server whole: the lock
// lives for centuries, a second client cannot take it, and a refresh keeps it.
// (Millis used to overflow here and send PX 1: the lock expired at once and a
// second holder took it.)
func TestLongestTTLKeepsTheLockOnTheServer(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d1, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if got := d1.Capabilities().MaxTTL; got != driver.DefaultMaxTTL {
		t.Fatalf("Capabilities().MaxTTL = %v, want what package lock accepts, %v", got, driver.DefaultMaxTTL)
	}
	req := &driver.Request{Key: "forever", Owner: "owner-1", TTL: math.MaxInt64, Lost: driver.LostFunc(func(error) {})}
	if _, err := d1.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, srv.URL())
	// In milliseconds, as the server says it (go-redis's PTTL would overflow
	// converting it to a time.Duration).
	const centuries = int64(290 * 365 * 24 * time.Hour / time.Millisecond)
	checkPTTL := func(when string) {
		t.Helper()
		pttl, err := admin.Do(ctx, "PTTL", d1.keys("forever").Lock).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if pttl < centuries {
			t.Fatalf("%s: the lock's PTTL on the server is %d ms, want over %d", when, pttl, centuries)
		}
	}
	checkPTTL("after acquire")
	other := &driver.Request{Key: "forever", Owner: "owner-2", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d2.TryAcquire(ctx, other); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("a second client's TryAcquire = %v, want ErrLocked", err)
	}
	if err := d1.Refresh(ctx, req); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	checkPTTL("after refresh")
	if err := d1.Release(ctx, req); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Through package lock, the longest TTL it accepts holds the lock against a
// second Locker.
func TestLongestAcceptedTTLExcludesASecondLocker(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, ttlMax := (&Driver{}).Capabilities().TTLRange()
	lockers := make([]*lock.Locker, 2)
	for i := range lockers {
		d, err := openURL(ctx, srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		lockers[i] = lock.New(d)
		defer lockers[i].Close()
	}
	l, err := lockers[0].TryAcquire(ctx, "long", lock.WithTTL(ttlMax))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := lockers[1].TryAcquire(ctx, "long", lock.WithTTL(time.Second)); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("second Locker's TryAcquire = %v, want ErrLocked", err)
	}
}
