package telemetrytest

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/lock"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A set's acquisition is one span carrying the set's size, and one point of
// the set histograms. Taken in one request (memdriver is a SetAcquirer) it has
// one attempt and no member spans; taken one key at a time (a key was held),
// each member's acquisition is a span under it and a point of its own.
func TestASetsAcquisitionIsOneSpanAndOnePointWithItsSize(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	s, err := r.lk.AcquireAll(ctx, []string{"b", "a", "c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := r.op.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.lk.TryAcquireAll(ctx, []string{"a", "b"}); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquireAll beside a holder of b = %v, want ErrLocked", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	m := r.collect()
	if got := find(m["distlock.acquire.set.duration"], r.backend, outcome("acquired")); len(got) != 1 || got[0].count != 1 {
		t.Errorf("acquired points of distlock.acquire.set.duration: %+v, want one of count 1", got)
	}
	if got := find(m["distlock.acquire.set.duration"], r.backend, outcome("locked")); len(got) != 1 || got[0].count != 1 {
		t.Errorf("locked points of distlock.acquire.set.duration: %+v, want one of count 1", got)
	}
	if got := find(m["distlock.acquire.set.keys"], r.backend); len(got) != 1 || got[0].count != 2 || got[0].value != 3+2 {
		t.Errorf("distlock.acquire.set.keys: %+v, want two sets of 3 and 2 keys", got)
	}
	// Only the second set's members, taken one at a time, count singly.
	if got := find(m["distlock.acquire.duration"], r.backend, outcome("acquired")); len(got) != 1 || got[0].count != 1 {
		t.Errorf("acquired points of distlock.acquire.duration: %+v, want a's alone", got)
	}
	if got := find(m["distlock.acquire.duration"], r.backend, outcome("locked")); len(got) != 1 || got[0].count != 1 {
		t.Errorf("locked points of distlock.acquire.duration: %+v, want b's alone", got)
	}

	children := func(parent sdktrace.ReadOnlySpan, name string) int {
		n := 0
		for _, sp := range r.spans.Ended() {
			if sp.Name() == name && sp.Parent().SpanID() == parent.SpanContext().SpanID() {
				n++
			}
		}
		return n
	}
	var sets int
	for _, sp := range r.spans.Ended() {
		switch sp.Name() {
		case "distlock.acquire-all":
			sets++
			if v := attr(sp, "distlock.set.size"); v != "3" {
				t.Errorf("the set span's distlock.set.size = %q, want 3", v)
			}
			if n := len(eventsNamed(sp, "attempt")); n != 1 || children(sp, "distlock.acquire") != 0 {
				t.Errorf("the set taken at once: %d attempts and %d member spans, want 1 and 0", n, children(sp, "distlock.acquire"))
			}
		case "distlock.try-acquire-all":
			sets++
			if v := attr(sp, "distlock.set.size"); v != "2" {
				t.Errorf("the try set span's distlock.set.size = %q, want 2", v)
			}
			if n := children(sp, "distlock.try-acquire"); n != 2 {
				t.Errorf("the set taken one key at a time has %d member spans under it, want 2", n)
			}
		}
	}
	if sets != 2 {
		t.Errorf("%d set spans, want 2", sets)
	}
}
