package filedriver

import (
	"errors"
	"testing"

	"github.com/distlock/lock/driver"
)

func sharedReq(key, owner string) *driver.Request {
	r := newReq(key, owner)
	r.Shared = true
	return r
}

func permitReq(key, owner string, n int) *driver.Request {
	r := newReq(key, owner)
	r.Permits = n
	return r
}

// A key in use as a semaphore of 3 refuses requests for 2 permits, from another
// client, as ErrInvalidArgument; once nobody holds a permit, 2 is accepted.
func TestAnotherNumberOfPermitsIsInvalidWhileTheSemaphoreIsInUse(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	three := permitReq("sem", "a", 3)
	mustAcquire(t, d1, three)
	if _, err := d2.TryAcquire(ctx, permitReq("sem", "b", 2)); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("TryAcquire of 2 permits on a semaphore of 3 = %v, want ErrInvalidArgument", err)
	}
	if _, err := d2.TryAcquire(ctx, permitReq("sem", "c", 3)); err != nil {
		t.Fatalf("TryAcquire of the same number of permits: %v", err)
	}
	if err := d1.Release(ctx, three); err != nil {
		t.Fatal(err)
	}
	if err := d2.Release(ctx, permitReq("sem", "c", 3)); err != nil {
		t.Fatal(err)
	}
	two := []*driver.Request{permitReq("sem", "d", 2), permitReq("sem", "e", 2)}
	for _, r := range two {
		mustAcquire(t, d2, r)
	}
	if _, err := d1.TryAcquire(ctx, permitReq("sem", "f", 2)); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("third holder of a semaphore of 2 = %v, want ErrLocked", err)
	}
}

// More permits than MaxPermits are refused as unsupported, not granted.
func TestSemaphoresAboveMaxPermitsAreUnsupported(t *testing.T) {
	d := newDriver(t, t.TempDir())
	if _, err := d.TryAcquire(testCtx(t), permitReq("sem", "a", MaxPermits+1)); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("TryAcquire of %d permits = %v, want ErrUnsupported", MaxPermits+1, err)
	}
}

// Shared and permit grants count in the key's lock file, as exclusive ones do:
// tokens keep increasing across clients and restarts of the driver.
func TestSharedTokensIncreaseAcrossClientsAndRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	var last uint64
	for i := 0; i < 3; i++ {
		d, err := New(dir)
		if err != nil {
			t.Fatal(err)
		}
		a, b, x := sharedReq("k", "a"), sharedReq("k", "b"), newReq("k", "x")
		for _, r := range []*driver.Request{a, b} {
			if tok := mustAcquire(t, d, r); tok <= last {
				t.Fatalf("round %d: shared token %d after %d", i, tok, last)
			} else {
				last = tok
			}
		}
		for _, r := range []*driver.Request{a, b} {
			if err := d.Release(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if tok := mustAcquire(t, d, x); tok <= last {
			t.Fatalf("round %d: exclusive token %d after %d", i, tok, last)
		} else {
			last = tok
		}
		d.Close()
	}
	if last != 9 {
		t.Fatalf("last token %d after 9 grants, want 9", last)
	}
}
