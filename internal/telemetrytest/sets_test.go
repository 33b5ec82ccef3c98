package telemetrytest

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/lock"
)

// A set's acquisition is one span (its members' acquisitions nested under
// it) carrying the set's size, and one point of the set histograms; each
// member still counts as an acquisition of its own.
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
	if got := find(m["distlock.acquire.duration"], r.backend, outcome("acquired")); len(got) != 1 || got[0].count != 3+1 {
		t.Errorf("acquired points of distlock.acquire.duration: %+v, want the 4 members' acquisitions", got)
	}

	var set, members int
	for _, sp := range r.spans.Ended() {
		switch sp.Name() {
		case "distlock.acquire-all":
			set++
			if v := attr(sp, "distlock.set.size"); v != "3" {
				t.Errorf("the set span's distlock.set.size = %q, want 3", v)
			}
			for _, child := range r.spans.Ended() {
				if child.Name() == "distlock.acquire" && child.Parent().SpanID() == sp.SpanContext().SpanID() {
					members++
				}
			}
		}
	}
	if set != 1 || members != 3 {
		t.Errorf("%d distlock.acquire-all spans with %d member spans under them, want 1 and 3", set, members)
	}
}
