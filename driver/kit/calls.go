package kit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
)

// Calls runs a driver's work in goroutines that its Close waits for: the
// calls of a client library that take no context (see Run), and any other
// background work (Go). It is the driver's gate for them: once Close has
// begun no more work starts, and Wait returns once every piece that started
// has ended. The zero value is ready to use; a Calls must not be copied.
type Calls struct {
	// Workers is how many goroutines Calls keeps, until Close, to run
	// work, so that a call costs a hand-over instead of a new goroutine
	// (whose stack would have to grow again into the client's on every
	// call). Work beyond that many at once gets a goroutine of its own.
	// Zero keeps none.
	Workers int

	// RunAfterClose makes Run, once Close has begun, run its work in the
	// caller's goroutine (for a driver that closed the client's
	// connections first, so that a call ends at once) instead of
	// returning driver.ErrClosed.
	RunAfterClose bool

	once    sync.Once
	mu      sync.RWMutex
	closed  bool
	done    chan struct{} // closed by Close: idle workers end
	jobs    chan func()   // hands work to an idle worker
	running sync.WaitGroup
	workers sync.WaitGroup
	nwork   atomic.Int32
}

// init makes c's channels, once.
func (c *Calls) init() {
	c.done = make(chan struct{})
	c.jobs = make(chan func())
}

// Go runs f in a goroutine that Wait waits for and reports true, unless
// Close has begun: then it reports false and f does not run.
func (c *Calls) Go(f func()) bool {
	c.once.Do(c.init)
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return false
	}
	// Counted before Close can wait: Close marks closed under the
	// write lock, and Wait comes after it.
	c.running.Add(1)
	c.mu.RUnlock()
	c.start(f)
	return true
}

// start runs f, counted in c.running, on an idle worker, a new worker, or a
// goroutine of its own.
func (c *Calls) start(f func()) {
	select {
	case c.jobs <- f:
		return
	default:
	}
	if c.nwork.Add(1) <= int32(c.Workers) {
		c.workers.Add(1)
		go c.work(f)
		return
	}
	c.nwork.Add(-1)
	go func() {
		defer c.running.Done()
		f()
	}()
}

// work runs f, then any work handed to it, until Close.
func (c *Calls) work(f func()) {
	defer c.workers.Done()
	defer c.nwork.Add(-1)
	for {
		f()
		c.running.Done()
		select {
		case f = <-c.jobs:
		case <-c.done:
			return
		}
	}
}

// Close refuses any more work (Go reports false) and lets the idle workers
// end. It does not wait: Wait does, once the driver has done what ends the
// work under way (cut its sockets, closed its client). Closing twice is
// harmless.
func (c *Calls) Close() {
	c.once.Do(c.init)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
}

// Closed reports whether Close has begun.
func (c *Calls) Closed() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.closed
}

// Wait waits, after Close, until every piece of work that started has ended
// and every worker goroutine has gone.
func (c *Calls) Wait() {
	c.running.Wait()
	c.workers.Wait()
}

// A Handoff carries one piece of work's outcome to its caller, who may give
// up waiting for it (Run, Continue). Work whose outcome would leave its
// caller something to undo (a lock granted, a node created) asks Deliver,
// once it knows the outcome, whether the caller will receive it, and undoes
// it itself if not.
type Handoff[T any] struct {
	state atomic.Int32 // handPending, then handDelivered or handAbandoned
	done  chan struct{}
	val   T
	err   error
}

const (
	handPending int32 = iota
	handDelivered
	handAbandoned
)

// Deliver reports whether the caller will receive the work's outcome. Once
// it has returned true the caller waits for the outcome however long its
// context lasts; once false, the caller has gone and never learns it.
func (h *Handoff[T]) Deliver() bool {
	return h.state.CompareAndSwap(handPending, handDelivered) || h.state.Load() == handDelivered
}

// GaveUpError is the error of Run or Continue when the caller's context
// ended before the work's outcome was delivered: the work goes on in the
// background, and its Handoff's Deliver reports false. It matches the
// context's error (errors.Is(err, context.DeadlineExceeded)).
type GaveUpError struct{ Err error }

func (e *GaveUpError) Error() string { return e.Err.Error() }
func (e *GaveUpError) Unwrap() error { return e.Err }

// GaveUp reports whether err is, or wraps, a *GaveUpError.
func GaveUp(err error) bool {
	var g *GaveUpError
	return errors.As(err, &g)
}

// Run runs work for a caller whose context is ctx and returns its outcome.
// If ctx ends first and the work does not finish within linger after that,
// Run returns a *GaveUpError while the work goes on in a goroutine of c's,
// and the work's Handoff tells it the caller has gone. A context that cannot
// end runs the work in the caller's goroutine. Once Close has begun, Run
// returns driver.ErrClosed without running work, or runs it in the caller's
// goroutine if c.RunAfterClose is set.
func Run[T any](c *Calls, ctx context.Context, linger time.Duration, work func(*Handoff[T]) (T, error)) (T, error) {
	h := &Handoff[T]{}
	if ctx.Done() == nil {
		return work(h)
	}
	h.done = make(chan struct{})
	if !c.Go(func() {
		h.val, h.err = work(h)
		close(h.done)
	}) {
		if c.RunAfterClose {
			return work(h)
		}
		var zero T
		return zero, driver.ErrClosed
	}
	return h.await(ctx, linger)
}

// Continue is Run for work that began in the caller's goroutine and is to
// go on without it now that ctx has ended (or may end): rest runs in a
// goroutine of c's (in the caller's, once Close has begun, since what was
// started must end), and the caller waits for it as Run's does. h is the
// Handoff the work's first part was given; Deliver must not have been
// called on it yet.
func (h *Handoff[T]) Continue(c *Calls, ctx context.Context, linger time.Duration, rest func() (T, error)) (T, error) {
	h.done = make(chan struct{})
	if !c.Go(func() {
		h.val, h.err = rest()
		close(h.done)
	}) {
		h.state.Store(handDelivered)
		return rest()
	}
	return h.await(ctx, linger)
}

// await waits for the outcome of work running in the background for a
// caller whose context is ctx: if ctx ends first, it waits linger more, then
// gives up unless the outcome was already claimed for the caller.
func (h *Handoff[T]) await(ctx context.Context, linger time.Duration) (T, error) {
	select {
	case <-h.done:
		return h.val, h.err
	case <-ctx.Done():
	}
	if linger > 0 {
		t := time.NewTimer(linger)
		select {
		case <-h.done:
			t.Stop()
			return h.val, h.err
		case <-t.C:
		}
	}
	select {
	case <-h.done: // both at once: the outcome is there, take it
		return h.val, h.err
	default:
	}
	if h.state.CompareAndSwap(handPending, handAbandoned) {
		var zero T
		return zero, &GaveUpError{ctx.Err()}
	}
	<-h.done // delivered as the context ended: it is on its way
	return h.val, h.err
}
