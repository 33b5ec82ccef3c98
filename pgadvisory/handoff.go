package pgadvisory

// Work left in flight when its caller's context ends.
//
// A statement on a lock session cannot be cancelled on the server without
// risk to the session's other locks (a cancel request ends whatever the
// session runs when it arrives), and closing the connection ends the session.
// So a statement whose caller's context ends before its answer goes on without
// the caller: reading the answer, and what it means for the driver's books,
// move to a goroutine of the driver's (roundTrip in flight.go, which reads in
// the caller's goroutine until then; runFor, for the query modes pgx runs,
// from the start), and the caller returns. Work whose caller left finishes on
// its own: the server answers, or the session is cut stmtGrace after the
// context ended and its locks are reported lost; Close ends it without the
// server and waits for it, so that none outlives the Driver.
//
// Work whose outcome would give its caller something to undo (a lock) asks the
// handoff, before committing to it, whether the caller will receive it, and
// undoes it itself if not. An acquire whose context ended still waits up to
// settleWait for that undoing (a lock given back, a wait cancelled and its
// session cleared): a server that answers needs a few milliseconds for it, so
// the call leaves nothing behind; a frozen server is left to the background.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
)

// handoff carries one piece of work's outcome to its caller.
type handoff[T any] struct {
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

// deliver reports whether the caller will receive the work's outcome. Once it
// returns true the caller waits for the outcome, however long its context
// lasts; once it returns false the caller has gone and never learns it.
func (h *handoff[T]) deliver() bool {
	return h.state.CompareAndSwap(handPending, handDelivered) || h.state.Load() == handDelivered
}

// settleWait is how long an acquire whose context ended waits for the server
// to settle what the acquire started (about 2 ms for a cancel request and the
// clearing on the development machine, a round trip to give back a lock).
const settleWait = 50 * time.Millisecond

// runFor runs work for a caller whose context is ctx and returns its outcome,
// or, if ctx ends first and the work does not finish within linger after that,
// ctx's error with gaveUp set while the work goes on in the background. A
// context that cannot end runs the work in the caller's goroutine, and so does
// a caller that comes after Close has begun (Close cuts every socket, so the
// work cannot wait on the server).
func runFor[T any](d *Driver, ctx context.Context, linger time.Duration, work func(*handoff[T]) (T, error)) (v T, err error, gaveUp bool) {
	h := &handoff[T]{}
	if ctx.Done() == nil {
		h.state.Store(handDelivered)
		v, err = work(h)
		return v, err, false
	}
	h.done = make(chan struct{})
	if !d.goJob(func() {
		h.val, h.err = work(h)
		close(h.done)
	}) {
		// Close has begun and cuts every socket: the work ends at once.
		h.state.Store(handDelivered)
		v, err = work(h)
		return v, err, false
	}
	return h.await(ctx, linger)
}

// await waits for the outcome of work running in the background for a caller
// whose context is ctx: if ctx ends first, it waits linger more, then gives
// up (gaveUp) unless the outcome was already claimed for the caller.
func (h *handoff[T]) await(ctx context.Context, linger time.Duration) (v T, err error, gaveUp bool) {
	select {
	case <-h.done:
		return h.val, h.err, false
	case <-ctx.Done():
	}
	if linger > 0 {
		t := time.NewTimer(linger)
		select {
		case <-h.done:
			t.Stop()
			return h.val, h.err, false
		case <-t.C:
		}
	}
	select {
	case <-h.done: // both at once: the outcome is there, take it
		return h.val, h.err, false
	default:
	}
	if h.state.CompareAndSwap(handPending, handAbandoned) {
		return v, ctx.Err(), true
	}
	<-h.done // delivered as the context ended: it is on its way
	return h.val, h.err, false
}

// goJob runs f in a goroutine that Close waits for, unless Close has begun.
func (d *Driver) goJob(f func()) bool {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false
	}
	d.jobs.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.jobs.Done()
		f()
	}()
	return true
}

// errBusy is the error of a Refresh or Release whose context ended while the
// session was busy with another statement: nothing was sent.
func errBusy(what string, ctxErr error) error {
	return fmt.Errorf("%w: pgadvisory: %s not sent: the lock's session was busy with another statement until the context ended: %w",
		driver.ErrUnavailable, what, ctxErr)
}

// errNoAnswer is the error of a Refresh or Release whose context ended before
// the server answered its statement, which goes on in the background: the
// outcome is unknown (driver.ErrUnavailable), and it matches ctxErr.
func errNoAnswer(what string, ctxErr error) error {
	return fmt.Errorf("%w: pgadvisory: %s: no answer from the server before the context ended (the statement goes on in the background): %w",
		driver.ErrUnavailable, what, ctxErr)
}
