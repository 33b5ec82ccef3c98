package pgadvisory

// Choosing, opening and retiring lock connections. A connection is picked under
// d.mu by raising its users count, and let go with letGo; statements then run
// under the connection's own mutex.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/distlock/lock/driver"
)

// Connections that hold nothing are kept for later waits and locks: keepIdle of
// them for good, the others until they have been idle for idleTimeout, so a
// burst of waiters that comes back does not reconnect each time.
const (
	keepIdle    = 2
	idleTimeout = 30 * time.Second
)

// queueToGrow is how many callers may be queued on the least busy connection
// before a new one is opened (below the cap): opening takes milliseconds,
// a statement about a hundred microseconds.
const queueToGrow = 4

// addConn registers a new connection picked by its opener (users = 1). If the
// server's start time differs from the one the driver knew, the server was
// restarted or replaced: locks on older sessions exclude no one who connects
// now, so those sessions are given up.
func (d *Driver) addConn(c *lockConn, waiting bool) error {
	d.mu.Lock()
	d.creating--
	if d.closed {
		d.broadcastLocked()
		d.mu.Unlock()
		c.closeConn()
		return errClosed
	}
	var stale []*lockConn
	if !d.epoch.IsZero() && !c.start.Equal(d.epoch) {
		stale = append(stale, d.conns...)
	}
	d.epoch = c.start
	c.users = 1
	c.waiting = waiting
	d.conns = append(d.conns, c)
	d.broadcastLocked()
	w := d.watch.Load()
	if w == nil {
		w = newSessionWatch(d.sessionEnded)
		d.watch.Store(w)
	}
	d.mu.Unlock()
	if w != nil {
		w.add(c)
	}
	if len(stale) > 0 {
		cause := errServerChanged(fmt.Errorf("the server's start time changed from %v to %v (restarted, or failed over to another server)", stale[0].start, c.start))
		for _, s := range stale {
			d.kill(s, cause)
			// Idle ones are closed here; cutting the socket makes a statement in
			// flight fail now, and its caller closes the connection.
			if s.mu.TryLock() {
				s.unlock()
			} else {
				_ = s.net.SetDeadline(time.Unix(1, 0))
			}
		}
	}
	return nil
}

var errClosed = fmt.Errorf("pgadvisory: %w", driver.ErrClosed)

// letGo ends a caller's use of c picked for it.
func (d *Driver) letGo(c *lockConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c.users--
	c.waiting = false
	if c.users == 0 && !c.dead.Load() {
		if len(c.locks) == 0 {
			c.idleSince = time.Now()
			if d.sweeper == nil && !d.closed && d.idleCountLocked() > keepIdle {
				d.sweeper = time.AfterFunc(idleTimeout, d.sweep)
			}
		}
		d.broadcastLocked()
	}
}

// idleCountLocked counts the connections that hold nothing and are not in use;
// d.mu is held.
func (d *Driver) idleCountLocked() int {
	n := 0
	for _, c := range d.conns {
		if c.users == 0 && len(c.locks) == 0 {
			n++
		}
	}
	return n
}

// idleLocked returns the connections that hold nothing and are not in use,
// most recently used first; d.mu is held.
func (d *Driver) idleLocked() []*lockConn {
	var idle []*lockConn
	for _, c := range d.conns {
		if c.users == 0 && len(c.locks) == 0 {
			idle = append(idle, c)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].idleSince.After(idle[j].idleSince) })
	return idle
}

// sweep closes the idle connections beyond keepIdle that have been idle for
// idleTimeout, and comes back for the others.
func (d *Driver) sweep() {
	d.mu.Lock()
	d.sweeper = nil
	if d.closed {
		d.mu.Unlock()
		return
	}
	var stale []*lockConn
	idle := d.idleLocked()
	next := time.Duration(0)
	for _, c := range idle[min(keepIdle, len(idle)):] {
		if left := idleTimeout - time.Since(c.idleSince); left > 0 {
			next = max(next, left)
			continue
		}
		c.dead.Store(true)
		d.removeLocked(c)
		stale = append(stale, c)
	}
	if next > 0 {
		d.sweeper = time.AfterFunc(next, d.sweep)
	}
	d.mu.Unlock()
	for _, c := range stale {
		c.mu.Lock()
		c.unlock() // closes it
	}
}

// connForTry picks a connection to send a non-blocking statement about ids on
// (one lock's, or a set's), opening one if all are busy and the cap allows, or
// waiting until one is usable. It returns driver.ErrLocked without a round trip
// when another owner in this process holds one of ids in a conflicting mode.
func (d *Driver) connForTry(ctx context.Context, shared bool, ids ...int64) (*lockConn, error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, errClosed
		}
		if slices.ContainsFunc(ids, func(id int64) bool { return d.conflicts(id, shared) }) {
			d.mu.Unlock()
			return nil, errHeldHere
		}
		// The least busy connection below the soft limit of locks, the fullest
		// of those (so that locks gather on few connections); failing that,
		// the least busy one.
		var best *lockConn
		better := func(c *lockConn) bool {
			if cf, bf := len(c.locks) >= d.o.locksPerConn, len(best.locks) >= d.o.locksPerConn; cf != bf {
				return !cf
			}
			if c.users != best.users {
				return c.users < best.users
			}
			return len(c.locks) > len(best.locks)
		}
		for _, c := range d.conns {
			if c.waiting || slices.ContainsFunc(ids, func(id int64) bool { return c.locks[id] != nil }) {
				continue
			}
			if best == nil || better(c) {
				best = c
			}
		}
		// One connection is opened at a time for statements like this one;
		// the others queue on it or wait for it.
		grow := best == nil || best.users >= queueToGrow || len(best.locks) >= d.o.locksPerConn
		if grow && d.creating == 0 && len(d.conns) < d.o.maxConns {
			d.creating++
			d.mu.Unlock()
			return d.open(ctx, false)
		}
		// Every connection full and the next one opening: wait for it rather
		// than pile more locks on a full one (under load a dial takes long
		// enough for thousands). At the cap, the limit is soft.
		waitForNew := best != nil && len(best.locks) >= d.o.locksPerConn && d.creating > 0
		if best != nil && !waitForNew {
			best.users++
			d.mu.Unlock()
			return best, nil
		}
		changed := d.changedLocked()
		d.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// errHeldHere is driver.ErrLocked for a lock another owner of this process holds.
var errHeldHere = fmt.Errorf("%w (by another owner in this process)", driver.ErrLocked)

// open opens a connection counted in d.creating and registers it as picked.
func (d *Driver) open(ctx context.Context, waiting bool) (*lockConn, error) {
	c, err := d.dial(ctx)
	if err != nil {
		d.mu.Lock()
		d.creating--
		d.broadcastLocked()
		d.mu.Unlock()
		return nil, err
	}
	if err := d.addConn(c, waiting); err != nil {
		return nil, err
	}
	return c, nil
}

// connForWait picks a connection that holds nothing to wait on, opening one if
// the cap allows. It returns nil when no connection can be had: every one is
// holding or waiting, and at least one must stay free of waits.
func (d *Driver) connForWait(ctx context.Context) (*lockConn, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errClosed
	}
	waiting := d.creating
	for _, c := range d.conns {
		if c.waiting {
			waiting++
		}
	}
	for _, c := range d.conns {
		if !c.waiting && c.users == 0 && len(c.locks) == 0 {
			c.users++
			c.waiting = true
			d.mu.Unlock()
			return c, nil
		}
	}
	if waiting >= d.o.maxConns-1 || len(d.conns)+d.creating >= d.o.maxConns {
		d.mu.Unlock()
		return nil, nil
	}
	d.creating++
	d.mu.Unlock()
	return d.open(ctx, true)
}
