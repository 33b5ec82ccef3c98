package zkdriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// A semaphore's n is stored in its key node by every permit grant; a request
// with another n while a lease is held is ErrInvalidArgument, and leaves no
// lease behind. Once the semaphore is idle, another n may take it over.
func TestPermitsOfAnotherNAreRefusedWhileTheSemaphoreIsInUse(t *testing.T) {
	base := testserver.ZooKeeper(t)
	u := base + "?prefix=" + zkdriver.EscapeName(t.Name())
	lk, d := mustOpen(t, u)
	conn := zkConn(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := d.LockPath("pool")

	held, err := lk.Acquire(ctx, "pool", lock.WithPermits(3))
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := conn.Get(path)
	if err != nil || string(data) != "distlock permits=3" {
		t.Fatalf("key node holds %q (%v), want %q", data, err, "distlock permits=3")
	}
	if _, err := lk.TryAcquire(ctx, "pool", lock.WithPermits(2)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire with 2 permits beside a holder of 3 = %v, want ErrInvalidArgument", err)
	}
	if _, err := lk.Acquire(ctx, "pool", lock.WithPermits(2)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("Acquire with 2 permits beside a holder of 3 = %v, want ErrInvalidArgument", err)
	}
	if kids := children(t, conn, path+"/leases"); len(kids) != 1 {
		t.Fatalf("leases after the refusals: %q, want the holder's alone", kids)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := lk.Acquire(ctx, "pool", lock.WithPermits(2))
	if err != nil {
		t.Fatalf("Acquire with 2 permits on the idle semaphore: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
