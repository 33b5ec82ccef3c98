package kit

import (
	"context"
	"sync"
	"time"
)

// Round shares one liveness round trip among the callers that ask for it
// while it is still to be sent: many refresh batches, each needing proof that
// the session was alive after it began, are all proved by one answer to a
// request sent after every one of them asked. An answer to a request sent
// before a caller asked proves nothing to that caller, so a caller joins
// only a trip not yet sent, or one sent no earlier than the moment it gives
// (since); otherwise it starts a trip of its own.
//
// The caller that starts a trip sends it, in its own goroutine and within
// its own context: it waits until the trip is due (the earliest by of the
// callers that joined it), then calls send, which marks the moment the
// request goes out by calling sent. If that caller's context ends before
// sent was called, or ends while the trip is under way and the trip fails,
// the callers that joined it and still have time start or join another trip.
// A caller whose context ends returns its context's error at once.
//
// The zero value is ready to use; a Round must not be copied.
type Round[T any] struct {
	mu     sync.Mutex
	cur    *trip[T] // the latest trip started, until it ends
	joined int      // callers waiting for a trip they joined (tests wait for them)
}

// trip is one round trip of a Round; the fields above done are guarded by
// Round.mu, the others are set before done is closed.
type trip[T any] struct {
	sent   bool
	sentAt time.Time     // when sent was called
	due    time.Time     // when it is to be sent: the earliest by of its callers
	sooner chan struct{} // (capacity 1) signalled when due moves earlier
	done   chan struct{}

	v     T
	err   error
	again bool // joiners still in time start another trip
}

// Share returns the outcome of a round trip sent no earlier than since, for
// a caller whose context is ctx: a trip it joined, or one it started and sent
// with send by the time by (at once if by has passed). send must call sent,
// once, just before its request goes out; a trip whose send returned without
// calling it counts as not sent. Share returns ctx's error if ctx ends first.
func (r *Round[T]) Share(ctx context.Context, since, by time.Time, send func(ctx context.Context, sent func()) (T, error)) (T, error) {
	for {
		r.mu.Lock()
		t := r.cur
		if t == nil || t.sent && t.sentAt.Before(since) {
			t = &trip[T]{due: by, sooner: make(chan struct{}, 1), done: make(chan struct{})}
			r.cur = t
			r.mu.Unlock()
			return r.lead(ctx, t, send)
		}
		if !t.sent && by.Before(t.due) {
			t.due = by
			select {
			case t.sooner <- struct{}{}:
			default:
			}
		}
		r.joined++
		r.mu.Unlock()
		var ctxErr error
		select {
		case <-t.done:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
		r.mu.Lock()
		r.joined--
		r.mu.Unlock()
		if ctxErr != nil {
			var zero T
			return zero, ctxErr
		}
		if t.again && ctx.Err() == nil {
			continue
		}
		return t.v, t.err
	}
}

// Pending reports whether a trip is waiting to be sent.
func (r *Round[T]) Pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur != nil && !r.cur.sent
}

// lead waits until t is due, sends it and hands its outcome to its joiners.
func (r *Round[T]) lead(ctx context.Context, t *trip[T], send func(context.Context, func()) (T, error)) (v T, err error) {
	if err := r.waitDue(ctx, t); err != nil {
		r.end(t, v, err, true)
		return v, err
	}
	v, err = send(ctx, func() {
		r.mu.Lock()
		if !t.sent {
			t.sent, t.sentAt = true, time.Now()
		}
		r.mu.Unlock()
	})
	r.end(t, v, err, err != nil && ctx.Err() != nil)
	return v, err
}

// waitDue waits until t is due, or returns ctx's error if ctx ends first.
func (r *Round[T]) waitDue(ctx context.Context, t *trip[T]) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.mu.Lock()
		wait := time.Until(t.due)
		r.mu.Unlock()
		if wait <= 0 {
			return ctx.Err()
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-t.sooner: // Reset above re-arms the timer
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// end records t's outcome and wakes its joiners; again tells those still in
// time to try another trip (the leader left), as does a trip never sent.
func (r *Round[T]) end(t *trip[T], v T, err error, again bool) {
	r.mu.Lock()
	if r.cur == t {
		r.cur = nil
	}
	t.v, t.err, t.again = v, err, again || !t.sent
	r.mu.Unlock()
	close(t.done)
}
