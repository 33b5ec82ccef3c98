package kit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Callers that ask while a trip waits to be sent share it: one send, one
// answer for all.
func TestRoundSharesATripNotYetSent(t *testing.T) {
	var r Round[int]
	ctx := context.Background()
	var sends atomic.Int32
	gate := make(chan struct{})
	const n = 10
	var joined sync.WaitGroup
	joined.Add(n - 1)
	send := func(ctx context.Context, sent func()) (int, error) {
		sends.Add(1)
		<-gate // the session is busy: the trip is not sent yet
		sent()
		return 99, nil
	}
	var wg sync.WaitGroup
	results := make([]int, n)
	wg.Add(1)
	go func() {
		defer wg.Done()
		results[0], _ = r.Share(ctx, time.Now(), time.Time{}, send)
	}()
	waitUntil(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.cur != nil }, "the first trip")
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			joined.Done()
			results[i], _ = r.Share(ctx, time.Now(), time.Time{}, send)
		}()
	}
	joined.Wait()
	waitUntil(t, func() bool { return waiters(&r) >= n-1 }, "the joiners to wait")
	close(gate)
	wg.Wait()
	if s := sends.Load(); s != 1 {
		t.Fatalf("%d sends; want 1 shared", s)
	}
	for i, v := range results {
		if v != 99 {
			t.Fatalf("caller %d got %d; want 99", i, v)
		}
	}
}

// A caller never takes the answer to a trip sent before it asked: it starts
// its own, while it joins one sent since the moment it gives.
func TestRoundNeverSharesAnEarlierTrip(t *testing.T) {
	var r Round[int]
	ctx := context.Background()
	inFlight := make(chan struct{})
	answer := make(chan struct{})
	var n atomic.Int32
	first := make(chan int, 1)
	go func() {
		v, _ := r.Share(ctx, time.Now(), time.Time{}, func(ctx context.Context, sent func()) (int, error) {
			sent()
			close(inFlight)
			<-answer
			return int(n.Add(1)), nil
		})
		first <- v
	}()
	waitFor(t, inFlight, "the first trip to be sent")
	// Asked before it was sent (since in the past): joins the one in flight.
	joined := make(chan int, 1)
	before := time.Now().Add(-time.Hour)
	go func() {
		v, _ := r.Share(ctx, before, time.Time{}, func(ctx context.Context, sent func()) (int, error) {
			t.Error("a caller whose since precedes the trip in flight sent one of its own")
			sent()
			return 0, nil
		})
		joined <- v
	}()
	waitUntil(t, func() bool { return waiters(&r) == 1 }, "the joiner to wait")
	// Asked after it was sent: a trip of its own.
	v, err := r.Share(ctx, time.Now(), time.Time{}, func(ctx context.Context, sent func()) (int, error) {
		sent()
		return 100 + int(n.Add(1)), nil
	})
	if err != nil || v != 101 {
		t.Fatalf("a caller after the send got %d, %v; want its own trip (101)", v, err)
	}
	close(answer)
	if v := <-first; v != 2 {
		t.Fatalf("the first trip got %d; want 2", v)
	}
	if v := <-joined; v != 2 {
		t.Fatalf("the joiner got %d; want the first trip's answer (2)", v)
	}
}

// A trip is sent when the earliest by of its callers comes: a later caller
// with an earlier by pulls it forward.
func TestRoundSendsAtTheEarliestBy(t *testing.T) {
	var r Round[int]
	ctx := context.Background()
	out := make(chan error, 1)
	go func() {
		_, err := r.Share(ctx, time.Now(), time.Now().Add(time.Hour), func(ctx context.Context, sent func()) (int, error) {
			sent()
			return 1, nil
		})
		out <- err
	}()
	waitUntil(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.cur != nil }, "the trip")
	start := time.Now()
	v, err := r.Share(ctx, time.Now(), time.Now(), func(ctx context.Context, sent func()) (int, error) {
		t.Error("the joiner sent a trip of its own")
		return 0, nil
	})
	if err != nil || v != 1 {
		t.Fatalf("Share = %d, %v; want the shared trip's 1", v, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the trip went out after %v; want at once, at the joiner's by", el)
	}
	if err := <-out; err != nil {
		t.Fatal(err)
	}
}

// When the caller that leads a trip leaves before it is sent, or its trip
// fails as its context ends, a joiner with time left runs another.
func TestRoundJoinersOutliveTheLeader(t *testing.T) {
	for _, sentFirst := range []bool{false, true} {
		var r Round[int]
		lctx, lcancel := context.WithCancel(context.Background())
		inSend := make(chan struct{})
		leader := make(chan error, 1)
		go func() {
			_, err := r.Share(lctx, time.Now(), time.Time{}, func(ctx context.Context, sent func()) (int, error) {
				if sentFirst {
					sent()
				}
				close(inSend)
				<-ctx.Done()
				return 0, ctx.Err()
			})
			leader <- err
		}()
		waitFor(t, inSend, "the leader's send")
		joined := make(chan struct{})
		res := make(chan int, 1)
		go func() {
			close(joined)
			v, err := r.Share(context.Background(), time.Now().Add(-time.Hour), time.Time{}, func(ctx context.Context, sent func()) (int, error) {
				sent()
				return 2, nil
			})
			if err != nil {
				t.Error(err)
			}
			res <- v
		}()
		waitFor(t, joined, "the joiner")
		waitUntil(t, func() bool { return waiters(&r) == 1 }, "the joiner to wait")
		lcancel()
		if err := <-leader; !errors.Is(err, context.Canceled) {
			t.Fatalf("leader: %v; want context.Canceled", err)
		}
		if v := <-res; v != 2 {
			t.Fatalf("sent first %v: the joiner got %d; want 2 from a trip of its own", sentFirst, v)
		}
	}
}

// A caller whose context ends returns its error at once.
func TestRoundCallerGivesUp(t *testing.T) {
	var r Round[int]
	hold := make(chan struct{})
	inSend := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.Share(context.Background(), time.Now(), time.Time{}, func(ctx context.Context, sent func()) (int, error) {
			sent()
			close(inSend)
			<-hold
			return 0, nil
		})
	}()
	waitFor(t, inSend, "the send")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Share(ctx, time.Now().Add(-time.Hour), time.Time{}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Share = %v; want context.Canceled", err)
	}
	close(hold)
	<-done
}

// waiters counts the goroutines blocked in Share's wait for a trip. It reads
// the runtime's view through a counter kept by the test hook below.
func waiters(r *Round[int]) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int(r.joined)
}

// waitUntil polls cond until it holds, failing t after a bound.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
