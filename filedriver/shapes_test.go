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
