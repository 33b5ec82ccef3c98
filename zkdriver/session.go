package zkdriver

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// One monitor goroutine per Driver looks after the session that holds every
// lock of the driver (never a goroutine per lock):
//
//   - A lock whose node belongs to a session other than the live one is lost:
//     the session expired (or was closed), and the server deleted its nodes.
//   - A disconnected session is suspended, not lost: it survives if the client
//     reconnects within the session timeout. But the ensemble may expire it
//     once the session timeout has passed since its leader last heard of it,
//     and then give the lock to someone else; so a held lock counts as lost
//     once that much time (minus the drift allowance) has passed since the
//     latest moment the leader is known to have heard of the session (credit),
//     before the leader can act. A heartbeat chain (below) keeps that moment
//     recent while connected.
//   - If such a presumed-lost session comes back after all, its nodes are
//     deleted (orphans), so they block nobody.
//
// What the credit may be. Only the leader expires sessions, and it hears of a
// session's activity on a follower late: the follower notes each request of
// the session (a touch) and reports the touches of the last interval in its
// answer to each of the leader's pings (every tickTime/2); the leader then
// schedules the session's expiry a session timeout after it received that
// report, rounded up to the next tick. A follower cut off from the leader goes
// on answering reads (an exists, a ping) for up to syncLimit ticks, so an
// answered read proves nothing to the leader. A sync does: the follower
// forwards it to the leader, on the same stream as its ping answers, and
// answers it only when the leader has, so by then the leader had received every
// ping answer the follower sent before the sync. Hence the chain: each
// heartbeat is a sync (itself a touch), sent at least driver.RefreshInterval
// (a third of the session timeout) after the previous one was answered; when it
// is answered, the previous heartbeat's touch, that long before, has been
// reported (the follower answered at least one ping in between, since a third
// of a session timeout is more than tickTime/2 whenever the timeout is at
// least two ticks, ZooKeeper's default minimum), and the credit moves to the
// previous heartbeat's send time. A session handshake (a new session, or a
// reconnection, which the leader itself revalidates) is a touch by the leader
// itself: its send time is credit too, and it keeps a previous heartbeat's
// touch good across a reconnection to another server, since the leader
// touched the session again after it. On a server that is itself the leader
// the touch is immediate, and the rule is merely conservative.
//
// The chain runs whenever the session is connected and its timeout known, held
// locks or not: a lock granted after a quiet spell must find the credit
// recent, and a sync is the only way to make it so. It costs one sync per third
// of the session timeout, the rate of the read the heartbeat used to be.
//
// On a connection the driver made (Open), go-zookeeper's event callback wakes
// the monitor at every state change and reports the deletion of a held node at
// once (a watch on each held node). On a connection given to New the monitor
// polls the connection's state while locks are held.

// pollInterval is how often the monitor of a Driver from New looks at the
// connection's session while holding locks.
const pollInterval = 50 * time.Millisecond

// cleanRetry is the pause after a failed attempt to delete orphans.
const cleanRetry = time.Second

// orphan is a node of ours that nobody wants: a path, or any node under parent
// with marker (a create whose outcome is unknown).
type orphan struct {
	path           string
	parent, marker string
	session        int64 // the session it belongs to (0: unknown); gone with it
}

func (d *Driver) nudge() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Driver) addOrphan(o orphan) {
	d.held.Lock()
	if !d.held.ClosedLocked() {
		d.orphans = append(d.orphans, o)
	}
	d.held.Unlock()
	d.nudge()
}

// credit records that the leader heard of the session at start or later (see
// above).
func (d *Driver) credit(start time.Time) {
	t := int64(start.Sub(d.epoch))
	for {
		old := d.lastTouch.Load()
		if t <= old || d.lastTouch.CompareAndSwap(old, t) {
			return
		}
	}
}

// sessionEstablished is told by tapConn what a connect handshake gave: the
// session (0 if the one asked for had expired), its negotiated timeout and its
// password, and when the request was sent.
func (d *Driver) sessionEstablished(id int64, timeout time.Duration, passwd []byte, sent time.Time) {
	if id == 0 {
		d.nudge()
		return
	}
	d.held.Lock()
	d.session = sessionInfo{id: id, timeout: timeout, passwd: passwd}
	d.held.Unlock()
	d.credit(sent) // the leader created or revalidated the session after sent
	d.nudge()
}

// sessionTimeout is the timeout the live session has: negotiated, on a
// connection the driver made; as declared by WithSessionTimeout otherwise (0:
// unknown).
func (d *Driver) sessionTimeout() time.Duration {
	d.held.Lock()
	defer d.held.Unlock()
	if d.ownConn {
		return d.session.timeout
	}
	return d.declared
}

// onEvent is go-zookeeper's event callback on a connection the driver made. It
// runs on go-zookeeper's receiving goroutine, so it must not block.
func (d *Driver) onEvent(ev zk.Event) {
	switch ev.Type {
	case zk.EventNodeDeleted:
		d.nodeGone(ev.Path)
	case zk.EventNodeDataChanged:
		d.rewatch(ev.Path)
	case zk.EventSession:
		d.stateChanged()
		d.nudge()
	case zk.EventNotWatching:
		d.nudge()
	}
}

// stateChanged wakes every awaitSession.
func (d *Driver) stateChanged() {
	next := make(chan struct{})
	close(*d.state.Swap(&next))
}

// awaitSession returns once the connection has a session, or ctx's error or
// driver.ErrClosed. A Driver from Open is woken by go-zookeeper's state events;
// one from New looks every pollInterval.
func (d *Driver) awaitSession(ctx context.Context) error {
	var tick <-chan time.Time
	for {
		changed := *d.state.Load()
		if d.conn.State() == zk.StateHasSession {
			return nil
		}
		if !d.ownConn && tick == nil {
			t := time.NewTicker(pollInterval)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-changed:
		case <-tick:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.held.Done():
			return driver.ErrClosed
		}
	}
}

// nodeGone reports the loss of the lock whose node at path was deleted by
// someone else (a Release marks its node first), with driver.ErrForceReleased
// when ForceRelease left a tombstone for it.
func (d *Driver) nodeGone(path string) {
	d.held.Lock()
	h := d.byPath[path]
	if h == nil || h.state != stateGranted {
		d.held.Unlock()
		return
	}
	d.removeLocked(h)
	// Lost tells whether ForceRelease evicted it, which takes a round trip:
	// not on go-zookeeper's receiving goroutine.
	v := &verdict{done: make(chan struct{}), err: errNodeDeleted}
	h.verdict = v
	d.wg.Add(1)
	d.held.Unlock()
	go func() {
		defer d.wg.Done()
		d.settle(v, path)
		h.req.Lost.Lost(v.err)
	}()
}

// rewatch notes that a held node's watch was used up by a change of its data
// (a Curator client asking for revocation writes to it); the next refresh sets
// it again.
func (d *Driver) rewatch(path string) {
	d.held.Lock()
	if h := d.byPath[path]; h != nil {
		h.watched = false
	}
	d.held.Unlock()
}

func (d *Driver) monitor() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := d.check(time.Now())
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-d.held.Done():
			return
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// lostLock is a loss to report once d.held is unlocked.
type lostLock struct {
	req   *driver.Request
	cause error
}

// check ends the locks the session can no longer vouch for, starts heartbeats
// and orphan deletion, and says when to look again.
func (d *Driver) check(now time.Time) time.Duration {
	state := d.conn.State()
	connected := state == zk.StateHasSession
	if !d.ownConn {
		d.seenHandshake(state, now)
	}
	live := d.conn.SessionID()
	timeout := d.sessionTimeout()
	last := d.epoch.Add(time.Duration(d.lastTouch.Load()))
	wait := time.Hour
	soon := func(t time.Time) {
		if w := t.Sub(now); w < wait {
			wait = max(w, time.Millisecond)
		}
	}

	var lost []lostLock
	d.held.Lock()
	if d.held.ClosedLocked() {
		d.held.Unlock()
		return wait
	}
	held := 0
	for _, h := range d.byPath {
		switch {
		case h.state != stateGranted:
			held++ // releasing
		case h.session != live:
			d.removeLocked(h)
			lost = append(lost, lostLock{h.req, errSessionEnded})
		case timeout > 0 && !now.Before(last.Add(timeout-driver.Drift(timeout))):
			// The server may expire the session a timeout after it last heard
			// from us, on its clock: give the locks up the portable layer's
			// drift allowance before that.
			d.removeLocked(h)
			lost = append(lost, lostLock{h.req, errSuspended})
			// The session may live on: delete the node once connected again.
			d.orphans = append(d.orphans, orphan{path: h.path(), session: h.session})
		default:
			held++
		}
	}
	if held > 0 && timeout > 0 {
		soon(last.Add(timeout - driver.Drift(timeout)))
	}
	if timeout > 0 && connected && !d.beating {
		// The chain's next link: a third of the session timeout after the
		// last one was answered (so that it credits that one), or a retry.
		due := d.beatAfter
		if !d.link.IsZero() {
			due = later(due, d.linkAnswered.Add(driver.RefreshInterval(timeout)))
		}
		if !now.Before(due) {
			d.beating = true
			d.wg.Add(1)
			go d.heartbeat(timeout)
		} else {
			soon(due)
		}
	}
	if !d.ownConn && (held > 0 || (timeout > 0 && !connected)) {
		// New: no events tell us of a new session, nor of the reconnection
		// after which the heartbeat chain goes on.
		soon(now.Add(pollInterval))
	}
	if d.ownConn && connected {
		d.armWake = false
		var arm []*holding
		for _, h := range d.byPath {
			if h.state != stateGranted || h.watched || h.arming {
				continue
			}
			if due := d.timeAt(h.start).Add(watchDelay); now.Before(due) {
				soon(due)
				d.armWake = true
			} else {
				h.arming = true
				arm = append(arm, h)
			}
		}
		if len(arm) > 0 {
			d.wg.Add(1)
			go d.arm(arm)
		}
	}
	if len(d.orphans) > 0 && !d.cleaning {
		switch {
		case connected && !now.Before(d.cleanAfter):
			d.cleaning = true
			d.wg.Add(1)
			go d.clean(live)
		case connected:
			soon(d.cleanAfter)
		case !d.ownConn:
			soon(now.Add(pollInterval)) // no event will say we are back
		}
	}
	d.held.Unlock()
	for _, l := range lost {
		l.req.Lost.Lost(l.cause)
	}
	return wait
}

// watchDelay is how long a lock is held before the monitor sets a watch on its
// node, which reports an operator's deletion of it at once. Locks held for less
// never cost the extra request; until the watch is set, refreshes (and setting
// it) find a deleted node.
const watchDelay = 200 * time.Millisecond

// arm sets watches on held nodes, pipelined.
func (d *Driver) arm(hs []*holding) {
	defer d.wg.Done()
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d.watchNode(d.ctx, h)
		}()
	}
	wg.Wait()
}

// watchNode sets a watch on a held node (a data watch: it also reports the
// node's deletion) and reports whether it was there.
func (d *Driver) watchNode(ctx context.Context, h *holding) (*zk.Stat, error) {
	d.held.Lock()
	path := h.path()
	d.held.Unlock()
	st, err := call(d, ctx, func() (*zk.Stat, error) {
		_, st, _, err := d.conn.GetW(path)
		return st, err
	}, nil)
	d.held.Lock()
	h.arming = false
	if err == nil {
		h.watched = true
	}
	d.held.Unlock()
	if errors.Is(err, zk.ErrNoNode) {
		d.nodeGone(path)
	}
	return st, err
}

// heartbeat sends the chain's next link, a sync, which the leader answers (see
// the top of this file): once it is answered, the previous link's touch has
// reached the leader, and its send time is credit.
func (d *Driver) heartbeat(timeout time.Duration) {
	defer d.wg.Done()
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	sent := time.Now()
	_, err := call(d, ctx, func() (string, error) {
		return d.conn.Sync(d.root)
	}, nil)
	answeredAt := time.Now()
	d.held.Lock()
	d.beating = false
	if err != nil {
		// No link: try again soon, without hammering a server that fails
		// at once.
		d.beatAfter = answeredAt.Add(driver.RetryInterval(timeout))
	} else {
		prev, prevAnswered := d.link, d.linkAnswered
		if !prev.IsZero() && !sent.Before(prevAnswered.Add(driver.RefreshInterval(timeout))) {
			d.credit(prev)
		}
		d.link, d.linkAnswered = sent, answeredAt
	}
	d.held.Unlock()
	d.nudge()
}

// seenHandshake stands in, on a connection given to New, for the handshakes
// that tapConn reports on the driver's own: go-zookeeper sends a handshake
// only after the connection is made, in state StateConnected, so once the
// monitor has seen the connection down (disconnected, connecting, or its
// session expired) at some moment and has a session again, the leader created
// or revalidated the session after that moment, which is credit. A reconnection
// the monitor does not see (between two looks) leaves the credit to the
// heartbeat chain.
func (d *Driver) seenHandshake(state zk.State, now time.Time) {
	switch state {
	case zk.StateDisconnected, zk.StateConnecting, zk.StateExpired:
		d.held.Lock()
		d.sawDown = now
		d.held.Unlock()
	case zk.StateHasSession:
		d.held.Lock()
		down := d.sawDown
		d.sawDown = time.Time{}
		d.held.Unlock()
		if !down.IsZero() {
			d.credit(down)
		}
	}
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// cleanTimeout bounds one attempt to delete one orphan.
const cleanTimeout = 10 * time.Second

// clean deletes the orphans of the live session; those of a session that ended
// went with it.
func (d *Driver) clean(live int64) {
	defer d.wg.Done()
	d.held.Lock()
	work := d.orphans
	d.orphans = nil
	d.held.Unlock()
	var keep []orphan
	for _, o := range work {
		if o.session != 0 && o.session != live {
			continue
		}
		ctx, cancel := context.WithTimeout(d.ctx, cleanTimeout)
		err := d.removeOrphan(ctx, o)
		cancel()
		if err != nil {
			keep = append(keep, o)
		}
	}
	d.held.Lock()
	d.cleaning = false
	if len(keep) > 0 && !d.held.ClosedLocked() {
		d.orphans = append(d.orphans, keep...)
		d.cleanAfter = time.Now().Add(cleanRetry)
	}
	d.held.Unlock()
	d.nudge()
}

// removeOrphan deletes an orphan node, or the node made with its marker.
func (d *Driver) removeOrphan(ctx context.Context, o orphan) error {
	if o.path != "" {
		if err := d.deleteNode(ctx, o.path); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		return nil
	}
	name, err := d.findMarked(ctx, o.parent, o.marker)
	if err != nil || name == "" {
		return err
	}
	if err := d.deleteNode(ctx, o.parent+"/"+name); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}
