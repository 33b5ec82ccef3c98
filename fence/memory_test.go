package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
)

// Equal tokens are admitted (one holder writes many times), smaller ones are
// refused with a StaleError naming the resource and the token, and resources
// are independent.
func TestMemoryAdmitsEqualAndLargerTokensAndRefusesSmaller(t *testing.T) {
	ctx := context.Background()
	m := fence.NewMemory()
	for _, tok := range []uint64{5, 5, 7, 7} {
		if err := m.Admit(ctx, "invoice:42", tok); err != nil {
			t.Fatalf("Admit(%d): %v", tok, err)
		}
	}
	err := m.Admit(ctx, "invoice:42", 6)
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(6) after 7: %v, want ErrStale", err)
	}
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Resource != "invoice:42" || se.Token != 6 || se.Highest != 7 {
		t.Fatalf("error %#v does not name the resource, the token and the highest admitted", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"invoice:42"`) || !strings.Contains(msg, "6") || !strings.Contains(msg, "newer holder") {
		t.Fatalf("message %q should name the resource, the token and a newer holder", msg)
	}
	if got := m.Highest("invoice:42"); got != 7 {
		t.Fatalf("Highest after a refused 6 = %d, want 7", got)
	}
	if err := m.Admit(ctx, "invoice:43", 1); err != nil {
		t.Fatalf("another resource's first token: %v", err)
	}
	var zero fence.Memory // ready to use
	if err := zero.Admit(ctx, "r", 3); err != nil {
		t.Fatalf("zero Memory's Admit(3): %v", err)
	}
	if err := zero.Admit(ctx, "r", 2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("zero Memory's Admit(2) after 3: %v, want ErrStale", err)
	}
}

// Token 0 (a backend without fencing), bad names and an ended context are
// refused with typed errors and change nothing.
func TestMemoryRefusesTokenZeroBadNamesAndEndedContexts(t *testing.T) {
	ctx := context.Background()
	m := fence.NewMemory()
	if err := m.Admit(ctx, "r", 0); !errors.Is(err, fence.ErrZeroToken) || !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("Admit(0) = %v, want ErrZeroToken and lock.ErrInvalidArgument", err)
	}
	for _, bad := range []string{"", strings.Repeat("x", fence.MaxResourceLen+1), "a\xffb", "line\nbreak"} {
		if err := m.Admit(ctx, bad, 1); !errors.Is(err, fence.ErrInvalidResource) || !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Admit(%q) = %v, want ErrInvalidResource", bad, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	if err := m.Guard(cancelled, "r", 3, func() error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Guard(cancelled) = %v (write ran: %v), want context.Canceled and no write", err, ran)
	}
	if got := m.Highest("r"); got != 0 {
		t.Fatalf("Highest after refused calls = %d, want 0", got)
	}
}

// While a guarded write runs, a newer token waits: it is admitted only after
// the write returns, so the older holder's write cannot land after it.
func TestMemoryGuardHoldsNewerTokensUntilTheWriteReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := fence.NewMemory()
	inWrite, finish := make(chan struct{}), make(chan struct{})
	guardDone := make(chan error, 1)
	go func() {
		guardDone <- m.Guard(ctx, "r", 1, func() error { close(inWrite); <-finish; return nil })
	}()
	<-inWrite
	admitDone := make(chan error, 1)
	go func() { admitDone <- m.Admit(ctx, "r", 2) }()
	// A bounded wait for something that must not happen.
	select {
	case err := <-admitDone:
		t.Fatalf("token 2 admitted (%v) while token 1's write ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	// Waiting honours the context.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := m.Admit(short, "r", 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Admit while the resource is busy, context ending: %v, want DeadlineExceeded", err)
	}
	close(finish)
	if err := <-guardDone; err != nil {
		t.Fatal(err)
	}
	if err := <-admitDone; err != nil {
		t.Fatal(err)
	}
	if got := m.Highest("r"); got != 2 {
		t.Fatalf("Highest = %d, want 2 (3's Admit gave up)", got)
	}
}

func TestMemoryConcurrentWritersEndWithTheLargestToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 10 {
		m := fence.NewMemory()
		var mu sync.Mutex
		var value string
		s := fenceprops.Store{
			Write: func(ctx context.Context, a fenceprops.Attempt) error {
				return m.Guard(ctx, "r", a.Token, func() error { mu.Lock(); value = a.Value; mu.Unlock(); return nil })
			},
			Read: func(context.Context) (string, error) { mu.Lock(); defer mu.Unlock(); return value, nil },
		}
		if _, err := fenceprops.ConcurrentWriters(ctx, s, 32, 32); err != nil {
			t.Fatal(err)
		}
	}
}
