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
// which would cost a read of its own. RefreshBatch shares the read instead:
// a batch joins the next read not yet sent, and the first batch to find none
// schedules one half a refresh interval (RefreshInterval of its TTL) later,
// or maxShareWait later if that is sooner. Every batch that arrived before
// the read was sent is confirmed by its answer, so the reads come at most
// once per maxShareWait, however many locks and batches there are. The cap
// keeps few batches waiting at once: each waits in a goroutine of the
// portable layer, and locks taken over a second on a Locker of many shards
// make hundreds of batches a refresh interval. A batch's confirmation arrives
// that much later, which takes nothing from its validity: the portable layer
// measures the new deadline from the moment it called RefreshBatch, before
// the read was sent, and the old deadline, a TTL after the previous refresh,
// is two thirds of a TTL after this one began.

// confirmRound is a read that batches share: sent at sendAt, confirming
// every batch that joined before.
type confirmRound struct {
	done   chan struct{} // closed once err is set
	err    error
	sendAt time.Time
}

// maxShareWait is the longest a batch waits for a shared read to go out: at
// most 40 reads a second for any number of held locks, and a batch's
// goroutine free again within that.
const maxShareWait = 25 * time.Millisecond

// roundTimeout bounds a shared read; each batch waits for it only within its
// own context.
const roundTimeout = 10 * time.Second

// confirmShared returns nil once the session has answered a read sent after
// confirmShared was called, and no later than by unless ctx ends first; reads
// of calls that overlap are shared (see above).
func (d *Driver) confirmShared(ctx context.Context, by time.Time) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.ErrClosed
	}
	r := d.round
	switch {
	case r != nil && r.sendAt.After(by):
		// The shared read goes out too late for this caller: a read of
		// its own.
		d.mu.Unlock()
		return d.confirm(ctx)
	case r == nil:
		r = &confirmRound{done: make(chan struct{}), sendAt: by}
		d.round = r
		d.wg.Add(1)
		go d.sendRound(r)
	}
	d.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendRound sends r's read at its time. Once it stops taking joiners, later
// calls start a round of their own, since only a read sent after a call can
// confirm it.
func (d *Driver) sendRound(r *confirmRound) {
	defer d.wg.Done()
	t := time.NewTimer(time.Until(r.sendAt))
	defer t.Stop()
	select {
	case <-t.C:
	case <-d.done:
	}
	d.mu.Lock()
	if d.round == r {
		d.round = nil
	}
	closed := d.closed
	d.mu.Unlock()
	if closed {
		r.err = driver.ErrClosed
	} else {
		ctx, cancel := context.WithTimeout(d.ctx, roundTimeout)
		r.err = d.confirm(ctx)
		cancel()
	}
	close(r.done)
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
