package pgadvisory

import (
	"context"
	"fmt"
	"sync"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// Release gives the lock back with pg_advisory_unlock on the session that holds
// it. It returns driver.ErrNotHeld if req.Owner holds no lock on req.Key here, if
// the session ended (the server released the lock with it), or if the server says
// the session did not hold it (the unlock's false result). It never touches
// another owner's lock.
//
// When ctx ends before the server answers, Release returns at once with an
// error matching driver.ErrUnavailable and ctx's error, and the unlock goes on
// in the background; the lock stays in the books until its answer comes. A
// later Release of the lock waits for that answer and reports it (nil if the
// lock was freed) rather than sending a second unlock, which could free the
// same lock taken since by another owner on the same session.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	ctx, done := d.attempt(ctx)
	return done(d.release(ctx, req))
}

func (d *Driver) release(ctx context.Context, req *driver.Request) error {
	k := ownerKey{req.Key, req.Owner}
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return errClosed
		}
		h := d.byOwner[k]
		if h == nil {
			d.mu.Unlock()
			return driver.ErrNotHeld
		}
		if h.gone {
			delete(d.byOwner, k)
			d.mu.Unlock()
			return h.outcome
		}
		if p := h.release; p != nil {
			// An earlier Release stopped waiting for its unlock: this one
			// waits for the same answer, and goes by the books after it.
			d.mu.Unlock()
			select {
			case <-p.done:
				continue
			case <-ctx.Done():
				return errNoAnswer("unlock", ctx.Err())
			case <-d.closing.Done():
				return errClosed
			}
		}
		p := &pendingRelease{done: make(chan struct{})}
		h.release = p
		h.c.users++
		d.mu.Unlock()
		err := d.unlock(ctx, h, p)
		if err == nil && d.o.holders {
			d.dropHolder(ctx, h)
		}
		return err
	}
}

// unlock sends the unlock of h and enters its outcome in the books: h is
// forgotten if the lock is gone (freed, or lost with its session), or kept
// held if the unlock was not sent or failed on a live session. If the caller
// has stopped waiting, a lock that is gone stays in byOwner, marked gone, to
// tell a later Release.
func (d *Driver) unlock(ctx context.Context, h *holding, p *pendingRelease) error {
	c := h.c
	done := func() {
		c.unlock()
		d.letGo(c)
		close(p.done)
	}
	if err := c.mu.LockContext(ctx); err != nil {
		d.mu.Lock()
		h.release = nil
		d.mu.Unlock()
		d.letGo(c)
		close(p.done)
		return errBusy("unlock", err)
	}
	if !d.holds(h) || c.dead.Load() {
		d.settle(nil, h, true, nil)
		done()
		return fmt.Errorf("%w: its session was lost", driver.ErrNotHeld)
	}
	if err := ctx.Err(); err != nil {
		d.settle(nil, h, false, nil)
		done()
		return err
	}
	_, err, gaveUp := roundTrip(d, ctx, trip{c: c, s: h.unlockStmt(), id: h.id},
		func(hand *kit.Handoff[struct{}], ok result, err error) (struct{}, error) {
			gone := true
			var out error
			switch {
			case c.broken(err):
				cause := errSessionLost(err)
				d.kill(c, cause)
				out = fmt.Errorf("%w: %w", driver.ErrNotHeld, cause)
			case err != nil && h.permits >= 2:
				// A permit's unlock happens at once, its announcement at
				// the statement's commit, which can fail after the unlock
				// (a full NOTIFY queue): settle it with a plain unlock,
				// whose false result means the slot was already freed.
				uctx, cancel := context.WithTimeout(context.Background(), stmtGrace)
				ok, uerr := c.exec(uctx, unlockStmt, h.id)
				cancel()
				if uerr != nil || ok.null {
					cause := errSessionLost(fmt.Errorf("unlock of a permit failed (%v), then %v", err, uerr))
					d.kill(c, cause)
					out = fmt.Errorf("%w: %w", driver.ErrNotHeld, cause)
				}
			case err != nil:
				gone = false // the lock stays held
				out = classify(ctx, fmt.Errorf("pgadvisory: unlock: %w", err))
			case ok.null:
				cause := d.pooled(c, 0)
				d.kill(c, cause)
				out = fmt.Errorf("%w: %w", driver.ErrNotHeld, cause)
			case ok.v == 0:
				out = fmt.Errorf("%w: pg_advisory_unlock returned false: the session did not hold the lock", driver.ErrNotHeld)
			}
			d.settle(hand, h, gone, out)
			return struct{}{}, out
		}, done)
	if gaveUp {
		return errNoAnswer("unlock", err)
	}
	return err
}

// unlockStmt is the statement that gives h back.
func (h *holding) unlockStmt() *stmt {
	if h.permits >= 2 {
		return unlockPermitStmt
	}
	return unlockFor(h.shared)
}

// settle enters the outcome of an unlock of h in the books (see unlock); hand
// is nil when the caller is there to hear it.
func (d *Driver) settle(hand *kit.Handoff[struct{}], h *holding, gone bool, out error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delivered := hand == nil || hand.Deliver()
	h.release = nil
	if !gone {
		return
	}
	if !delivered && !d.closed && d.byOwner[h.k] == h {
		d.unbookLocked(h)
		h.gone, h.outcome = true, out
	} else {
		d.forgetLocked(h)
	}
	d.broadcastLocked()
}

// holds reports whether h is still a held lock.
func (d *Driver) holds(h *holding) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.closed && d.byOwner[h.k] == h && !h.gone
}

// Refresh confirms that req.Owner still holds req.Key: the session holding it
// answers a ping, from the same backend. A session that is gone or changed is
// given up (every lock on it is reported lost) and Refresh returns
// driver.ErrNotHeld. Refreshes of locks on one connection that are due together
// share one round trip.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	h, err := d.lookup(req)
	if err != nil {
		return err
	}
	return classify(ctx, d.confirm(h, h.c.ping(ctx)))
}

func (d *Driver) lookup(req *driver.Request) (*holding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errClosed
	}
	h := d.byOwner[ownerKey{req.Key, req.Owner}]
	if h == nil {
		return nil, driver.ErrNotHeld
	}
	if h.gone && h.outcome == errForced {
		delete(d.byOwner, h.k)
		return nil, errForced
	}
	if h.gone {
		// Released by an unlock whose caller stopped waiting: the portable
		// layer ends the lock on this answer and asks no more about it.
		delete(d.byOwner, h.k)
		return nil, fmt.Errorf("%w: released by an earlier Release that completed after its caller stopped waiting", driver.ErrNotHeld)
	}
	return h, nil
}

// confirm turns the outcome of a ping of h's session into h's refresh result.
func (d *Driver) confirm(h *holding, pingErr error) error {
	d.mu.Lock()
	held := !d.closed && d.byOwner[h.k] == h && !h.gone
	forced := h.gone && h.outcome == errForced
	if h.gone && d.byOwner[h.k] == h {
		// Freed by an unlock that completed during the ping: the portable
		// layer ends the lock on this answer and asks no more about it.
		delete(d.byOwner, h.k)
	}
	d.mu.Unlock()
	if held {
		return pingErr // nil, or a failure that left the session in place
	}
	if forced {
		return errForced
	}
	if pingErr == nil {
		pingErr = errSessionLost(fmt.Errorf("released or lost while refreshing"))
	}
	return fmt.Errorf("%w: %w", driver.ErrNotHeld, pingErr)
}

// RefreshBatch refreshes many locks with one ping per connection that holds any
// of them, the connections pinged concurrently.
func (d *Driver) RefreshBatch(ctx context.Context, reqs []*driver.Request) []error {
	errs := make([]error, len(reqs))
	hs := make([]*holding, len(reqs))
	var conns []*lockConn
	seen := map[*lockConn]int{}
	for i, req := range reqs {
		h, err := d.lookup(req)
		if err != nil {
			errs[i] = err
			continue
		}
		hs[i] = h
		if _, ok := seen[h.c]; !ok {
			seen[h.c] = len(conns)
			conns = append(conns, h.c)
		}
	}
	pings := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pings[i] = c.ping(ctx)
		}()
	}
	wg.Wait()
	for i, h := range hs {
		if h != nil {
			errs[i] = classify(ctx, d.confirm(h, pings[seen[h.c]]))
		}
	}
	return errs
}
