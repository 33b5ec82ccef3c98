package memdriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
)

func setReq(key, owner string) *driver.Request {
	return &driver.Request{Key: key, Owner: owner, TTL: 10 * time.Second}
}

// A set is taken in one request, all or nothing: with one key held elsewhere
// none is taken, and the attempt leaves no trace on the others.
func TestASetIsTakenAllOrNothingInOneRequest(t *testing.T) {
	ctx := context.Background()
	a, b := memdriver.New(t.Name()), memdriver.New(t.Name())
	defer a.Close()
	defer b.Close()
	gs, err := a.TryAcquireSet(ctx, []*driver.Request{setReq("a", "o1"), setReq("b", "o2")})
	if err != nil || len(gs) != 2 || gs[0].Token == 0 || gs[1].Token == 0 {
		t.Fatalf("TryAcquireSet of two free keys = %v, %v", gs, err)
	}
	if _, err := b.TryAcquireSet(ctx, []*driver.Request{setReq("b", "o3"), setReq("c", "o4")}); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("TryAcquireSet with b held = %v, want ErrLocked", err)
	}
	if _, err := b.TryAcquire(ctx, setReq("c", "o5")); err != nil {
		t.Fatalf("c after the refused set: %v, want it free", err)
	}
	if in, err := b.Inspect(ctx, "d"); err != nil || len(in.Holders) != 0 {
		t.Fatalf("Inspect of a key never asked for: %+v, %v", in, err)
	}
	if _, err := b.TryAcquireSet(ctx, []*driver.Request{setReq("e", "o6"), setReq("d", "o7")}); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Errorf("TryAcquireSet out of byte order = %v, want ErrInvalidArgument", err)
	}
	if _, err := b.TryAcquire(ctx, setReq("d", "o8")); err != nil {
		t.Errorf("d after the refused set: %v, want it free", err)
	}
}
