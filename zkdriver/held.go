package zkdriver

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// Refresh confirms that req.Owner still holds req.Key: the session that made
// its node is the live one and the node still exists. Locks here do not expire,
// so nothing is extended; a confirmed Refresh tells the portable layer that the
// session was alive when it was sent. While disconnected the lock is
// suspended, neither confirmed nor lost: Refresh waits for the connection to
// come back, within ctx (for automatic refresh the portable layer ends ctx at
// the lock's validity deadline), and then makes its one request in the session
// it finds. A failure of that request is returned marked driver.ErrUnavailable.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.ErrClosed
	}
	h := d.holds[holdKey{req.Key, req.Owner}]
	if h == nil || h.state == stateWaiting {
		d.mu.Unlock()
		return driver.ErrNotHeld
	}
	if h.state == stateReleasing {
		d.mu.Unlock()
		return nil // ours until Release's delete lands
	}
	path, session := h.path(), h.session
	d.mu.Unlock()

	if err := d.awaitSession(ctx); err != nil {
		return d.closedOr(err)
	}
	if d.conn.SessionID() != session {
		return d.lose(ctx, h, errSessionEnded)
	}
	d.mu.Lock()
	arm := d.ownConn && !h.watched && !h.arming
	if arm {
		h.arming = true
	}
	watched := d.ownConn && h.watched
	d.mu.Unlock()
	var st *zk.Stat
	var err error
	if watched {
		// The watch reports a deletion; confirm.go says why a shared read
		// is enough.
		if err = d.confirm(ctx); err == nil {
			recheck, err := d.confirmedByWatch(ctx, h, session)
			if !recheck {
				return err
			}
			watched = false // used up meanwhile: read the node
		}
	}
	switch {
	case watched:
	case arm:
		st, err = d.watchNode(ctx, h)
	default:
		st, err = call(d, ctx, func() (*zk.Stat, error) {
			ok, st, err := d.conn.Exists(path)
			if err == nil && !ok {
				err = zk.ErrNoNode
			}
			return st, err
		}, nil)
	}
	switch {
	case errors.Is(err, zk.ErrNoNode) || err == nil && st != nil && st.EphemeralOwner != session:
		return d.lose(ctx, h, errNodeDeleted)
	case errors.Is(err, zk.ErrSessionExpired):
		return d.lose(ctx, h, errSessionEnded)
	case err != nil:
		return unavailable(d.closedOr(err))
	}
	return nil
}

// confirmedByWatch answers a Refresh of a watched lock after a shared read
// succeeded: held, unless the session changed or the watch reported the
// node's deletion before the read's answer. recheck is true, with no answer,
// when the watch was used up by a change of the node's data (rewatch) before
// the answer: a deletion after that would have gone unreported, so the lock
// needs a read of its own node.
func (d *Driver) confirmedByWatch(ctx context.Context, h *holding, session int64) (recheck bool, err error) {
	if d.conn.SessionID() != session {
		return false, d.lose(ctx, h, errSessionEnded)
	}
	d.mu.Lock()
	state, watched := h.state, h.watched
	d.mu.Unlock()
	switch {
	case state == stateDone:
		return false, d.lose(ctx, h, errNodeDeleted)
	case state == stateGranted && !watched:
		return true, nil
	}
	return false, nil
}

// lose ends h with cause after Refresh found it gone, and returns cause. A
// Release whose delete may be what Refresh saw wins: the lock was given up, not
// lost, and the Refresh that raced with it confirms it instead. (A session that
// ended took the node whether or not a Release was under way.) A node deleted
// by someone else may have been evicted by ForceRelease: goneCause tells.
func (d *Driver) lose(ctx context.Context, h *holding, cause error) error {
	d.mu.Lock()
	switch {
	case h.state == stateReleased,
		h.state == stateReleasing && cause == errNodeDeleted:
		d.mu.Unlock()
		return nil
	case h.state == stateGranted:
		d.removeLocked(h)
	case h.verdict == nil:
		d.mu.Unlock()
		return cause // ended otherwise (its session), and told so
	}
	path := h.path()
	d.mu.Unlock()
	if cause == errNodeDeleted {
		return d.goneCause(ctx, h, path)
	}
	return cause
}

// batchParallel is how many refreshes of one batch are in flight at once;
// go-zookeeper pipelines them on the one connection.
const batchParallel = 16

// RefreshBatch refreshes several locks: those whose nodes carry a watch with
// one shared read (confirm.go), the others pipelined, up to batchParallel in
// flight.
func (d *Driver) RefreshBatch(ctx context.Context, reqs []*driver.Request) []error {
	errs := make([]error, len(reqs))
	type watchedLock struct {
		i       int
		h       *holding
		session int64
	}
	var watched []watchedLock
	var rest []int
	for i, r := range reqs {
		if h, session, ok := d.watchedHold(r); ok {
			watched = append(watched, watchedLock{i, h, session})
		} else {
			rest = append(rest, i)
		}
	}
	if len(watched) > 0 {
		if err := d.confirmShared(ctx, d.shareBy(ctx, reqs)); err == nil {
			for _, w := range watched {
				var recheck bool
				if recheck, errs[w.i] = d.confirmedByWatch(ctx, w.h, w.session); recheck {
					rest = append(rest, w.i)
				}
			}
		} else {
			for _, w := range watched {
				rest = append(rest, w.i) // each finds its own way: wait, retry or lose
			}
		}
	}
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for _, i := range rest {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = d.Refresh(ctx, reqs[i])
		}()
	}
	wg.Wait()
	return errs
}

// shareBy is when a shared read must go out at the latest to confirm reqs:
// half a refresh interval of the shortest TTL among them (see confirm.go),
// at most d.shareWait, and no later than a third of the way to ctx's
// deadline.
func (d *Driver) shareBy(ctx context.Context, reqs []*driver.Request) time.Time {
	now := time.Now()
	wait := d.shareWait
	for _, r := range reqs {
		wait = min(wait, driver.RefreshInterval(r.TTL)/2)
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, dl.Sub(now)/3)
	}
	return now.Add(max(wait, 0))
}

// Release deletes req.Owner's node. For a held lock that hands the lock to the
// next in the queue; for a request still waiting it leaves the queue. It
// returns driver.ErrNotHeld if the lock was not held (gone with an expired
// session, deleted, or never granted), and never touches another owner's node:
// every node's name is unique to the request that made it. While disconnected
// it waits for the connection to come back, within ctx; if ctx ends first, or
// the delete fails (returned marked driver.ErrUnavailable when transient), the
// lock stays held and the error is returned.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.ErrClosed
	}
	h := d.holds[holdKey{req.Key, req.Owner}]
	if h == nil {
		d.mu.Unlock()
		return driver.ErrNotHeld
	}
	if h.state == stateWaiting {
		return d.leaveQueue(ctx, h) // unlocks d.mu
	}
	h.state = stateReleasing // its deletion is not a loss
	path, session := h.path(), h.session
	d.mu.Unlock()

	err := d.awaitSession(ctx)
	if err == nil && d.conn.SessionID() != session {
		err = zk.ErrSessionExpired
	}
	if err == nil {
		err = d.deleteNode(ctx, path)
	}
	return d.released(ctx, h, err)
}

// released records the outcome of Release's delete.
func (d *Driver) released(ctx context.Context, h *holding, err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		// Deleted by someone else: perhaps evicted, which goneCause tells
		// (a round trip, outside d.mu).
		d.mu.Lock()
		ours := !d.closed && h.state == stateReleasing
		if ours {
			d.removeLocked(h)
		}
		path := h.path()
		d.mu.Unlock()
		if !ours {
			return d.releasedElse()
		}
		return d.goneCause(ctx, h, path)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return driver.ErrClosed
	case h.state != stateReleasing: // lost meanwhile
		return driver.ErrNotHeld
	case err == nil:
		d.removeLocked(h)
		h.state = stateReleased
		return nil
	case errors.Is(err, zk.ErrSessionExpired):
		d.removeLocked(h)
		return errSessionEnded
	default:
		h.state = stateGranted // still ours, as far as we know
		return unavailable(err)
	}
}

// releasedElse is released's answer when the driver closed, or the lock was
// lost, while its delete was under way.
func (d *Driver) releasedElse() error {
	if d.isClosed() {
		return driver.ErrClosed
	}
	return driver.ErrNotHeld
}

// leaveQueue forgets a request that was never granted and deletes whatever node
// it may have made. d.mu is held, and released.
func (d *Driver) leaveQueue(ctx context.Context, h *holding) error {
	d.removeLocked(h)
	var o orphan
	switch {
	case h.a().sent:
		// A create is still in flight (its Acquire gave up waiting for it):
		// createAbandoned deletes what it makes, once it returns.
		d.mu.Unlock()
		return driver.ErrNotHeld
	case h.name() != "":
		o = orphan{path: h.path()}
	case h.a().unsure:
		o = orphan{parent: h.parent, marker: h.a().marker}
	default:
		d.mu.Unlock()
		return driver.ErrNotHeld
	}
	o.session = h.ownerOrCreator()
	d.mu.Unlock()
	if err := d.removeOrphan(ctx, o); err != nil {
		d.addOrphan(o) // deleted once the connection is back
	}
	return driver.ErrNotHeld
}
