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
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return err
	}
	h := d.held.GetLocked(holdKey{req.Key, req.Owner})
	if h == nil || h.state == stateWaiting {
		d.held.Unlock()
		return driver.ErrNotHeld
	}
	if h.state == stateReleasing {
		d.held.Unlock()
		return nil // ours until Release's delete lands
	}
	path, session := h.path(), h.session
	d.held.Unlock()

	if err := d.awaitSession(ctx); err != nil {
		return d.closedOr(err)
	}
	if d.conn.SessionID() != session {
		return d.lose(ctx, h, errSessionEnded)
	}
	d.held.Lock()
	arm := d.ownConn && !h.watched && !h.arming
	if arm {
		h.arming = true
	}
	watched := d.ownConn && h.watched
	d.held.Unlock()
	var st *zk.Stat
	var err error
	if watched {
		// The watch reports a deletion; the comment before confirmShared
		// says why a shared read is enough.
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
	d.held.Lock()
	state, watched := h.state, h.watched
	d.held.Unlock()
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
	d.held.Lock()
	switch {
	case h.state == stateReleased,
		h.state == stateReleasing && cause == errNodeDeleted:
		d.held.Unlock()
		return nil
	case h.state == stateGranted:
		d.removeLocked(h)
	case h.verdict == nil:
		d.held.Unlock()
		return cause // ended otherwise (its session), and told so
	}
	path := h.path()
	d.held.Unlock()
	if cause == errNodeDeleted {
		return d.goneCause(ctx, h, path)
	}
	return cause
}

// batchParallel is how many refreshes of one batch are in flight at once;
// go-zookeeper pipelines them on the one connection.
const batchParallel = 16

// RefreshBatch refreshes several locks: those whose nodes carry a watch with
// one shared read (confirmShared), the others pipelined, up to batchParallel in
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
// half a refresh interval of the shortest TTL among them (see confirmShared),
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
	d.held.Lock()
	defer d.held.Unlock()
	h := d.held.GetLocked(holdKey{req.Key, req.Owner})
	if d.held.ClosedLocked() || !d.ownConn || h == nil || h.state != stateGranted || !h.watched || h.session != d.conn.SessionID() {
		return nil, 0, false
	}
	return h, h.session, true
}
