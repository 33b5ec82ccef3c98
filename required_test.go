package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
)

// Open with the capabilities a backend has succeeds; with ones it lacks it
// fails with ErrUnsupported naming each missing one.
func TestOpenWithRequiredCapabilitiesFailsNamingEachMissingOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := lock.Open(ctx, "mem://required", lock.WithRequired(lock.Capabilities{Fencing: true, Shared: true, Permits: true}))
	if err != nil {
		t.Fatalf("Open(mem://) requiring what mem has: %v", err)
	}
	if err := lk.Do(ctx, "k", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do on a Locker whose requirements hold: %v", err)
	}
	lk.Close()

	// mem has every boolean capability, so the missing ones come from New's
	// driver below; Open's refusal is shown by the Redis driver's tests
	// (fencing=false against a real server).
	nl := lock.New(nopDriver{}, lock.WithRequired(lock.Capabilities{Fencing: true, Expiring: true, FIFO: true}))
	defer nl.Close()
	_, err = nl.TryAcquire(ctx, "k")
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("TryAcquire on New's Locker lacking fencing: %v, want ErrUnsupported", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "fencing") || !strings.Contains(msg, "fifo") || strings.Contains(msg, "expiring") {
		t.Fatalf("error %q should name fencing and fifo (missing) and not expiring (present)", msg)
	}
	err = nl.Do(ctx, "k", func(context.Context) error { t.Error("Do ran fn on a Locker lacking a requirement"); return nil })
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("Do: %v, want ErrUnsupported", err)
	}
	// Per call, too.
	plain := lock.New(nopDriver{})
	defer plain.Close()
	if _, err := plain.TryAcquire(ctx, "k", lock.WithRequired(lock.Capabilities{Fencing: true})); !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("TryAcquire(WithRequired(fencing)) on a driver without: %v, want ErrUnsupported", err)
	}
}

// Durations are limits, not requirements: asking for them is a bad argument.
func TestWithRequiredRefusesTTLLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := lock.Open(ctx, "mem://required-ttl", lock.WithRequired(lock.Capabilities{MinTTL: time.Second}))
	if !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("Open(WithRequired(MinTTL)) = %v, want ErrInvalidArgument", err)
	}
}
