package zkdriver

import (
	"context"

	"github.com/distlock/lock/driver"
)

// A held node that carries a watch needs no read of its own to be confirmed:
// ZooKeeper delivers a watch event before the answer to any later request on the
// same session, and go-zookeeper hands events to the driver (onEvent) before it
// hands over later answers. So any answer to a request sent after a refresh
// began proves that, as of that request, the session was alive and no deletion
// of the node had been reported; had one been, the lock would already be
// removed. One such read confirms every watched lock of a batch at once
// (RefreshBatch), which keeps the refresh traffic of many held locks at one
// request per batch, not one per lock.

// confirm sends a read on the session and returns its error: nil means the
// session answered a request sent after confirm was called.
func (d *Driver) confirm(ctx context.Context) error {
	_, err := call(d, ctx, func() (bool, error) {
		ok, _, err := d.conn.Exists(d.root)
		return ok, err
	}, nil)
	return err
}

// watchedHold returns the lock of req if it is held with a watch on its node
// and the session that made it is the live one, and that session.
func (d *Driver) watchedHold(req *driver.Request) (*holding, int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.holds[holdKey{req.Key, req.Owner}]
	if d.closed || !d.ownConn || h == nil || h.state != stateGranted || !h.watched || h.session != d.conn.SessionID() {
		return nil, 0, false
	}
	return h, h.session, true
}
