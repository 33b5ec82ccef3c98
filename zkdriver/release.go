package zkdriver

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// Release deletes req.Owner's node. For a held lock that hands the lock to the
// next in the queue; for a request still waiting it leaves the queue. It
// returns driver.ErrNotHeld if the lock was not held (gone with an expired
// session, deleted, or never granted), and never touches another owner's node:
// every node's name is unique to the request that made it. While disconnected
// it waits for the connection to come back, within ctx; if ctx ends first, or
// the delete fails (returned marked driver.ErrUnavailable when transient), the
// lock stays held and the error is returned.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return err
	}
	h := d.held.GetLocked(holdKey{req.Key, req.Owner})
	if h == nil {
		d.held.Unlock()
		return driver.ErrNotHeld
	}
	if h.state == stateWaiting {
		return d.leaveQueue(ctx, h) // unlocks d.held
	}
	h.state = stateReleasing // its deletion is not a loss
	path, session := h.path(), h.session
	d.held.Unlock()

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
		// (a round trip, outside d.held).
		d.held.Lock()
		ours := !d.held.ClosedLocked() && h.state == stateReleasing
		if ours {
			d.removeLocked(h)
		}
		path := h.path()
		d.held.Unlock()
		if !ours {
			return d.releasedElse()
		}
		return d.goneCause(ctx, h, path)
	}
	d.held.Lock()
	defer d.held.Unlock()
	switch {
	case d.held.ClosedLocked():
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
// it may have made. d.held is locked, and released.
func (d *Driver) leaveQueue(ctx context.Context, h *holding) error {
	d.removeLocked(h)
	var o orphan
	switch {
	case h.a().sent:
		// A create is still in flight (its Acquire gave up waiting for it):
		// createAbandoned deletes what it makes, once it returns.
		d.held.Unlock()
		return driver.ErrNotHeld
	case h.name() != "":
		o = orphan{path: h.path()}
	case h.a().unsure:
		o = orphan{parent: h.parent, marker: h.a().marker}
	default:
		d.held.Unlock()
		return driver.ErrNotHeld
	}
	o.session = h.ownerOrCreator()
	d.held.Unlock()
	if err := d.removeOrphan(ctx, o); err != nil {
		d.addOrphan(o) // deleted once the connection is back
	}
	return driver.ErrNotHeld
}
