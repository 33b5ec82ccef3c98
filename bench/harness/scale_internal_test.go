package harness

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// readings makes a key's expiry readings: at[i] ms after t0, expiry exp[i] ms
// after t0 (-1: the key was free).
func readings(at, exp []int) []expiryObs {
	t0 := time.Unix(1_000_000, 0)
	obs := make([]expiryObs, len(at))
	for i := range at {
		obs[i].at = t0.Add(time.Duration(at[i]) * time.Millisecond)
		if exp[i] >= 0 {
			obs[i].expires = t0.Add(time.Duration(exp[i]) * time.Millisecond)
		}
	}
	return obs
}

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestRefreshLatenessIsTheExpiryMoveBeyondAThirdOfTheTTL(t *testing.T) {
	const ttl = 3 * time.Second
	// Refreshes at 1000 (on time), 2030 (30 ms late), 3020 (10 ms early
	// relative to 2030+1000): expiry is the refresh time plus the TTL.
	obs := readings(
		[]int{0, 500, 1001, 1500, 2031, 2500, 3021},
		[]int{3000, 3000, 4000, 4000, 5030, 5030, 6020})
	got := refreshLateness(obs, ttl)
	if want := ms(0, 30, -10); !slices.Equal(got, want) {
		t.Errorf("lateness = %v, want %v", got, want)
	}
}

func TestRefreshLatenessIgnoresClockRoundingAndDriftNoise(t *testing.T) {
	const ttl = 3 * time.Second
	// Moves of a few ms without a refresh: the server's clock rounding, or a
	// drift allowance recomputed at each reading (Redlock).
	obs := readings([]int{0, 500, 1000}, []int{3000, 3003, 2998})
	if got := refreshLateness(obs, ttl); len(got) != 0 {
		t.Errorf("lateness = %v from noise, want none", got)
	}
}

func TestRefreshLatenessSkipsAGapWhereTwoRefreshesCouldHide(t *testing.T) {
	const ttl = 3 * time.Second
	// 1200 ms between readings (> TTL/4): two refreshes may lie between, and
	// the move (2000 ms) would read as one refresh 1 s late.
	obs := readings([]int{0, 1200, 1700}, []int{3000, 5000, 5000})
	if got := refreshLateness(obs, ttl); len(got) != 0 {
		t.Errorf("lateness = %v across an ambiguous gap, want none", got)
	}
	// A late refresh seen between close readings still counts in full.
	obs = readings([]int{0, 700, 1400, 1450}, []int{3000, 3000, 3000, 4400})
	if got, want := refreshLateness(obs, ttl), ms(400); !slices.Equal(got, want) {
		t.Errorf("lateness = %v, want %v", got, want)
	}
}

func TestRefreshLatenessCountsAnExpiredKeyAsLateAtLeastUntilSeenFree(t *testing.T) {
	const ttl = 3 * time.Second
	// Refresh due at 1000 never came: the key expired at 3000 and was seen
	// free at 3200, at least 2200 ms late. The chain then breaks: the next
	// holder's expiry is no refresh of this one.
	obs := readings([]int{0, 2800, 3200, 3400, 3600}, []int{3000, 3000, -1, 6400, 6400})
	if got, want := refreshLateness(obs, ttl), ms(2200); !slices.Equal(got, want) {
		t.Errorf("lateness = %v, want %v", got, want)
	}
	// Free before its expiry: released (or evicted), not late.
	obs = readings([]int{0, 500, 1000}, []int{3000, -1, 4000})
	if got := refreshLateness(obs, ttl); len(got) != 0 {
		t.Errorf("lateness = %v for a key freed before its expiry, want none", got)
	}
}

func TestClosedSeesOnlyAClosedChannel(t *testing.T) {
	open, shut := make(chan struct{}), make(chan struct{})
	close(shut)
	if closed(nil) || closed(open) || !closed(shut) {
		t.Errorf("closed(nil, open, shut) = %v, %v, %v; want false, false, true", closed(nil), closed(open), closed(shut))
	}
}

func TestLossesCountEachLostLockOnceWithItsCause(t *testing.T) {
	open, shut := make(chan struct{}), make(chan struct{})
	close(shut)
	expired, notHeld, down := errors.New("expired"), errors.New("not held"), errors.New("unreachable")
	lost := []Loss{
		{Done: shut, Cause: func() error { return expired }}, // lost, release fails too: once
		{Done: open}, // held; its release failed: a failure, not a loss
		{Done: open}, // held, released
		{},           // unwatched, release failed: lost
		{},           // unwatched, released
		{Done: shut}, // lost, no cause given
	}
	relErrs := []error{notHeld, down, nil, notHeld, nil, nil}
	n, cause, failed := losses(lost, relErrs)
	if n != 3 {
		t.Errorf("losses = %d, want 3", n)
	}
	if !errors.Is(cause, expired) {
		t.Errorf("first cause = %v, want %v", cause, expired)
	}
	if !errors.Is(failed, down) {
		t.Errorf("release failure = %v, want %v", failed, down)
	}
	if n, cause, failed := losses(make([]Loss, 3), make([]error, 3)); n != 0 || cause != nil || failed != nil {
		t.Errorf("losses of locks all released = %d, %v, %v; want 0, nil, nil", n, cause, failed)
	}
}

// countingWatcher is a Watcher that counts how its locks were taken.
type countingWatcher struct{ plain, watched *atomic.Int64 }

func (c countingWatcher) Acquire(context.Context, string) (Release, error) {
	c.plain.Add(1)
	return func(context.Context) error { return nil }, nil
}

func (c countingWatcher) AcquireWatched(context.Context, string) (Release, Loss, error) {
	c.watched.Add(1)
	return func(context.Context) error { return nil }, Loss{Done: make(chan struct{})}, nil
}

func (c countingWatcher) TryAcquire(ctx context.Context, key string) (Release, error) {
	return c.Acquire(ctx, key)
}

func (countingWatcher) Close() error { return nil }

func TestHeldLocksAreTakenPlainlyAndScaleLocksWatched(t *testing.T) {
	cl := countingWatcher{new(atomic.Int64), new(atomic.Int64)}
	ctx := context.Background()
	_, lost, err := holdMany(ctx, cl, "held", 20, false)
	if err != nil || lost != nil || cl.plain.Load() != 20 || cl.watched.Load() != 0 {
		t.Errorf("unwatched hold: %d plain, %d watched, %d losses, %v; want 20, 0, none, nil",
			cl.plain.Load(), cl.watched.Load(), len(lost), err)
	}
	cl.plain.Store(0)
	_, lost, err = holdMany(ctx, cl, "scale", 20, true)
	if err != nil || len(lost) != 20 || cl.plain.Load() != 0 || cl.watched.Load() != 20 {
		t.Errorf("watched hold: %d plain, %d watched, %d losses, %v; want 0, 20, 20, nil",
			cl.plain.Load(), cl.watched.Load(), len(lost), err)
	}
}
