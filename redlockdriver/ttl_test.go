package redlockdriver

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// The longest TTL a time.Duration holds reaches every server whole: a second
// client cannot take the lock, and a refresh keeps it. (Millis used to
// overflow here and send PX 1: the lock expired at once.)
func TestLongestTTLKeepsTheLockOnEveryServer(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d1, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := openURL(ctx, redlockURL(servers))
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
	// In milliseconds, as the servers say it.
	const centuries = int64(290 * 365 * 24 * time.Hour / time.Millisecond)
	checkPTTL := func(when string) {
		t.Helper()
		for i, a := range admin {
			pttl, err := a.Do(ctx, "PTTL", d1.keys("forever").Lock).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if pttl < centuries {
				t.Fatalf("%s: the lock's PTTL on server %d is %d ms, want over %d", when, i+1, pttl, centuries)
			}
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
