package redisdriver

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/lock/driver"
)

// A waiter is one Acquire call waiting in a lock's queue. The inbox reader
// sends it the token of a lock handed to it.
type waiter struct {
	granted chan uint64 // buffered: the reader never blocks
}

// pollWithoutInbox is how often a waiter looks again while the driver has no
// pub/sub subscription (the server refused it, or it is reconnecting). It keeps
// its place in the queue meanwhile; only the wake-up is slower.
const pollWithoutInbox = 50 * time.Millisecond

// Acquire blocks until req.Owner holds req.Key, ctx is done or the driver is
// closed. It joins the key's queue, so waiters are served in arrival order, and
// is woken by the release that hands it the lock (see Waiting in the package
// documentation). It succeeds at once if the key already holds req.Owner. When
// its context ends or the driver is closed it leaves the queue (and releases a
// lock handed to it meanwhile). A backend error (matching driver.ErrUnavailable
// when transient) keeps its place for a retry with the same owner; Release
// gives the place up.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := d.usable(ctx); err != nil {
		return driver.Grant{}, err
	}
	// ended is the error of a round trip that failed because the call's context
	// ended or the driver was closed meanwhile, or err.
	ended := func(err error) error {
		if d.ctx.Err() != nil {
			return driver.ErrClosed
		}
		if perr := ctx.Err(); perr != nil {
			return perr
		}
		return classify(err)
	}
	k := d.keys(req.Key)
	// A first try that respects the queue without joining it, so that an
	// uncontended Acquire costs what TryAcquire does.
	start := time.Now()
	r, err := d.runAcquire(ctx, k, req, probeMode, 0)
	if err != nil {
		return driver.Grant{}, ended(err)
	}
	if r.status != acqBusy {
		if err := d.recordGrant(ctx, k, req, r.plain); err != nil {
			return driver.Grant{}, ended(err)
		}
		return grant(r, req, start), nil
	}

	w, err := d.startWait(req.Owner)
	if err != nil {
		return driver.Grant{}, err
	}
	defer d.endWait(req.Owner, w)
	// Close ends the wait (a round trip in flight ends at its read timeout at
	// worst: go-redis honours deadlines, not cancellation).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)()
	// stopped leaves the queue and returns the error of a call ended by its
	// context or by Close.
	stopped := func() error {
		d.abandon(req)
		return ended(wctx.Err())
	}
	subscribed := d.subscribe(wctx) == nil
	lease := max(req.TTL, minLease)
	var asked time.Time // when the last request that found the lock not ours was sent
	for {
		resub := d.resubscribed()
		start := time.Now()
		r, err := d.runAcquire(wctx, k, req, waitMode, lease)
		if err != nil {
			if wctx.Err() != nil {
				return driver.Grant{}, stopped()
			}
			// The place in the queue is kept for package lock's retry with
			// the same owner (its cleanup releases it if it gives up).
			return driver.Grant{}, classify(err)
		}
		if r.status != acqBusy {
			if err := d.recordGrant(wctx, k, req, r.plain); err != nil {
				if wctx.Err() != nil {
					return driver.Grant{}, stopped()
				}
				return driver.Grant{}, err
			}
			return grant(r, req, start), nil
		}
		asked = start
		wait := lease / 3
		if r.wait >= 0 && r.wait+time.Millisecond < wait {
			wait = r.wait + time.Millisecond // just after the holder's TTL ends
		}
		if !subscribed && wait > pollWithoutInbox {
			wait = pollWithoutInbox
		}
		t := time.NewTimer(wait)
		select {
		case token := <-w.granted:
			t.Stop()
			driver.Woke(ctx, driver.WakeNotified)
			// A handoff writes the owner alone, with its record in the
			// fence key (see grantLock in common.lua).
			if err := d.recordGrant(wctx, k, req, false); err != nil {
				if wctx.Err() != nil {
					return driver.Grant{}, stopped()
				}
				return driver.Grant{}, err
			}
			// The lock was handed to us after the server answered the request
			// sent at asked, and with our TTL.
			return driver.Grant{Token: d.token(token), Start: asked}, nil
		case <-t.C:
			driver.Woke(ctx, driver.WakeTimer)
		case <-resub:
			// The inbox reconnected: a handoff may have been missed. The
			// re-check is the fallback's, not a handoff.
			t.Stop()
			subscribed = true
			driver.Woke(ctx, driver.WakeTimer)
		case <-wctx.Done(): // the caller's context, or Close
			t.Stop()
			return driver.Grant{}, stopped()
		}
	}
}

// startWait registers a waiting call for the inbox reader and for Close.
func (d *Driver) startWait(owner string) (*waiter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, driver.ErrClosed
	}
	w := &waiter{granted: make(chan uint64, 1)}
	d.waiters[owner] = w
	d.calls.Add(1)
	return w, nil
}

func (d *Driver) endWait(owner string, w *waiter) {
	d.mu.Lock()
	if d.waiters[owner] == w {
		delete(d.waiters, owner)
	}
	d.mu.Unlock()
	d.calls.Done()
}

// abandon takes a waiter out of its queue, and releases the lock if it was
// handed to the waiter meanwhile, so a cancelled Acquire leaves nothing behind.
func (d *Driver) abandon(req *driver.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	_, _ = d.release(ctx, req)
}

// deliver passes a handoff message, "<owner> <token>", to its waiter. A message
// for an owner no longer waiting is dropped: that owner either released the
// lock already (abandon) or finds it on its next attempt.
func (d *Driver) deliver(payload string) {
	owner, tok, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return
	}
	d.mu.Lock()
	w := d.waiters[owner]
	d.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case w.granted <- token:
	default:
	}
}

func isNotHeld(err error) bool { return errors.Is(err, driver.ErrNotHeld) }
