package zkdriver

import (
	"context"
	"time"

	"github.com/distlock/lock/driver"
)

// A held node that carries a watch needs no read of its own to be confirmed:
// ZooKeeper delivers a watch event before the answer to any later request on the
// same session, and go-zookeeper hands events to the driver (onEvent) before it
// hands over later answers. So any answer to a request sent after a refresh
// began proves that, as of that request, the session was alive and no deletion
// of the node had been reported; had one been, the lock would already be
// removed. One such read confirms every watched lock of a batch at once
// (RefreshBatch), so the refresh traffic of many held locks is not one
// request per lock.

// Automatic refresh confirms locks in batches of those due together (the
// portable layer gathers what falls due within a few milliseconds), so locks
// taken over a second make a hundred batches a refresh interval, each of
// which would cost a read of its own. RefreshBatch shares the read instead
// (kit.Round): a batch joins the next read not yet sent, and the first batch
// to find none schedules one half a refresh interval (RefreshInterval of its
// TTL) later, or maxShareWait later if that is sooner; a batch that joins
// with a sooner deadline brings the read forward. Every batch that arrived before
// the read was sent is confirmed by its answer, so the reads come at most
// once per maxShareWait, however many locks and batches there are. The cap
// keeps few batches waiting at once: each waits in a goroutine of the
// portable layer, and locks taken over a second on a Locker of many shards
// make hundreds of batches a refresh interval. A batch's confirmation arrives
// that much later, which takes nothing from its validity: the portable layer
// measures the new deadline from the moment it called RefreshBatch, before
// the read was sent, and the old deadline, a TTL after the previous refresh,
// is two thirds of a TTL after this one began.

// maxShareWait is the longest a batch waits for a shared read to go out: at
// most 40 reads a second for any number of held locks, and a batch's
// goroutine free again within that.
const maxShareWait = 25 * time.Millisecond

// confirmShared returns nil once the session has answered a read sent after
// confirmShared was called, and no later than by unless ctx ends first; reads
// of calls that overlap are shared (d.rounds, see above): a batch joins the
// read not yet sent, which goes out at the earliest by of those that joined.
func (d *Driver) confirmShared(ctx context.Context, by time.Time) error {
	if d.isClosed() {
		return driver.ErrClosed
	}
	_, err := d.rounds.Share(ctx, time.Now(), by, func(ctx context.Context, sent func()) (struct{}, error) {
		if d.isClosed() {
			return struct{}{}, driver.ErrClosed
		}
		sent()
		return struct{}{}, d.confirm(ctx)
	})
	return err
}

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
