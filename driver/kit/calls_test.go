package kit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
)

// waitFor fails t unless ch closes within a generous bound.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A call that answers before the caller's context ends gives its answer,
// and its Handoff delivers.
func TestRunReturnsTheAnswer(t *testing.T) {
	var c Calls
	defer func() { c.Close(); c.Wait() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := Run(&c, ctx, 0, func(h *Handoff[int]) (int, error) {
		if !h.Deliver() {
			t.Error("Deliver reported false to work whose caller waits")
		}
		return 42, nil
	})
	if v != 42 || err != nil {
		t.Fatalf("Run = %d, %v; want 42, nil", v, err)
	}
}

// The caller gives up when its context ends; the call goes on, learns from
// Deliver that its caller has gone, and can undo what it did; Wait waits for
// it.
func TestRunLetsTheCallerGiveUpAndTheCallClean(t *testing.T) {
	var c Calls
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	undone := make(chan struct{})
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := Run(&c, ctx, 0, func(h *Handoff[string]) (string, error) {
			close(started)
			<-release // the client's call, which takes no context
			if !h.Deliver() {
				close(undone) // the caller left: undo what the call did
			}
			return "granted", nil
		})
		errc <- err
	}()
	waitFor(t, started, "the call to start")
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
	if !GaveUp(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want a *GaveUpError matching context.Canceled", err)
	}
	close(release)
	waitFor(t, undone, "the abandoned call to clean up")
	c.Close()
	c.Wait()
}

// A caller whose context ended waits linger more, and takes an answer that
// comes within it.
func TestRunLingers(t *testing.T) {
	var c Calls
	defer func() { c.Close(); c.Wait() }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, err := Run(&c, ctx, time.Minute, func(h *Handoff[int]) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatalf("Run = %d, %v; want 7, nil", v, err)
	}
}

// Work that claimed its outcome for the caller (Deliver true) is waited for
// even when the caller's context ends after that.
func TestRunWaitsForAnOutcomeDelivered(t *testing.T) {
	var c Calls
	defer func() { c.Close(); c.Wait() }()
	ctx, cancel := context.WithCancel(context.Background())
	delivered := make(chan struct{})
	finish := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		v, err := Run(&c, ctx, 0, func(h *Handoff[int]) (int, error) {
			if !h.Deliver() {
				t.Error("Deliver = false before the context ended")
			}
			close(delivered)
			<-finish
			return 1, nil
		})
		if v != 1 {
			t.Errorf("Run = %d; want 1", v)
		}
		errc <- err
	}()
	waitFor(t, delivered, "Deliver")
	cancel()
	close(finish)
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v; want the delivered outcome", err)
	}
}

// A context that cannot end runs the work in the caller's goroutine.
func TestRunWithoutDoneRunsInline(t *testing.T) {
	var c Calls
	c.Close()
	v, err := Run(&c, context.Background(), 0, func(*Handoff[int]) (int, error) { return 3, nil })
	if v != 3 || err != nil {
		t.Fatalf("Run = %d, %v; want 3, nil", v, err)
	}
}

// After Close, Run refuses with driver.ErrClosed, or runs inline with
// RunAfterClose; Go refuses.
func TestRunAfterClose(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c Calls
	c.Close()
	ran := false
	_, err := Run(&c, ctx, 0, func(*Handoff[int]) (int, error) { ran = true; return 0, nil })
	if !errors.Is(err, driver.ErrClosed) || ran {
		t.Fatalf("Run after Close = %v (ran %v); want driver.ErrClosed, not run", err, ran)
	}
	if c.Go(func() { t.Error("Go ran work after Close") }) {
		t.Fatal("Go after Close reported true")
	}
	if !c.Closed() {
		t.Fatal("Closed = false after Close")
	}
	c2 := Calls{RunAfterClose: true}
	c2.Close()
	v, err := Run(&c2, ctx, 0, func(*Handoff[int]) (int, error) { return 5, nil })
	if v != 5 || err != nil {
		t.Fatalf("Run after Close with RunAfterClose = %d, %v; want 5, nil", v, err)
	}
	c.Wait()
	c2.Wait()
}

// Continue moves work begun in the caller's goroutine to c's, and the caller
// gives up as with Run; after Close it runs the rest inline.
func TestHandoffContinue(t *testing.T) {
	var c Calls
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handoff[int]{}
	release := make(chan struct{})
	abandoned := make(chan struct{})
	cancel()
	_, err := h.Continue(&c, ctx, 0, func() (int, error) {
		<-release
		if !h.Deliver() {
			close(abandoned)
		}
		return 1, nil
	})
	if !GaveUp(err) {
		t.Fatalf("Continue = %v; want a *GaveUpError", err)
	}
	close(release)
	waitFor(t, abandoned, "the rest to learn the caller left")
	c.Close()
	c.Wait()
	h2 := &Handoff[int]{}
	v, err := h2.Continue(&c, ctx, 0, func() (int, error) { return 2, h2Deliver(h2) })
	if v != 2 || err != nil {
		t.Fatalf("Continue after Close = %d, %v; want 2, nil", v, err)
	}
}

func h2Deliver(h *Handoff[int]) error {
	if !h.Deliver() {
		return errors.New("Deliver = false for a rest run inline")
	}
	return nil
}

// Workers are kept for reuse up to Workers, the work beyond gets goroutines
// of its own, and Wait returns once all of it ended and the workers left.
func TestCallsWorkers(t *testing.T) {
	c := Calls{Workers: 2}
	const n = 8
	var ran atomic.Int32
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	for range n {
		if !c.Go(func() {
			started.Done()
			<-release
			ran.Add(1)
		}) {
			t.Fatal("Go refused before Close")
		}
	}
	started.Wait() // all n at once: beyond the workers too
	close(release)
	for i := range 100 { // reuse of idle workers, one at a time
		done := make(chan struct{})
		if !c.Go(func() { close(done) }) {
			t.Fatalf("Go %d refused before Close", i)
		}
		waitFor(t, done, "work on a worker")
	}
	c.Close()
	c.Wait()
	if got := ran.Load(); got != n {
		t.Fatalf("%d pieces of work ran; want %d", got, n)
	}
	if w := c.nwork.Load(); w != 0 {
		t.Fatalf("%d workers left after Wait", w)
	}
}

// Go racing with Close either runs its work, which Wait then waits for, or
// refuses it; nothing runs after Wait returns.
func TestCallsCloseRacesWithGo(t *testing.T) {
	for range 50 {
		c := Calls{Workers: 2}
		var ran, accepted atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if c.Go(func() { ran.Add(1) }) {
					accepted.Add(1)
				}
			}()
		}
		c.Close()
		wg.Wait() // every Go has returned
		c.Wait()
		if ran.Load() != accepted.Load() {
			t.Fatalf("%d pieces of work ran of %d accepted, after Wait", ran.Load(), accepted.Load())
		}
	}
}
