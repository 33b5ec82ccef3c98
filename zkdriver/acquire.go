package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// The recipe is ZooKeeper's own (recipes.html, "Locks") in Curator's layout:
//
//  1. create <key node>/_c_<marker>-lock-<seq>, ephemeral and sequential, making
//     the key node as a container if it is missing;
//  2. list the key node's children; if ours has the lowest sequence, it is held;
//  3. otherwise watch only the next lower node (no herd effect) and go to 2 when
//     it goes.

// TryAcquire makes one attempt: it queues a node, and removes it again and
// returns driver.ErrLocked if another owner is ahead in the queue.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, req, false)
}

// Acquire queues a node and waits until every node ahead of it has gone,
// woken by a watch on its predecessor. It waits through disconnections: a
// session that survives keeps the place in the queue, and after an expired one
// the node is queued again in the new session.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, req, true)
}

// errVanished says our node disappeared before we could hold it; the caller
// queues again.
var errVanished = errors.New("zkdriver: lock node vanished")

func (d *Driver) acquire(ctx context.Context, req *driver.Request, wait bool) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	if req.Shared {
		return driver.Grant{}, fmt.Errorf("%w: shared locks", driver.ErrUnsupported)
	}
	h, g, held, err := d.holding(req)
	if held || err != nil {
		return g, err
	}
	var pause backoff
	for {
		g, err := d.step(ctx, h, wait)
		switch {
		case err == nil:
			return g, nil
		case errors.Is(err, errVanished):
			continue
		case wait && transient(err) && ctx.Err() == nil && !d.isClosed():
			// Disconnected: go-zookeeper reconnects on its own; keep our place.
			if err := pause.wait(ctx, d.done); err != nil {
				return driver.Grant{}, err
			}
			if err := d.awaitSession(ctx); err != nil {
				return driver.Grant{}, d.closedOr(err)
			}
		default:
			return driver.Grant{}, err
		}
	}
}

// step makes sure h has a node, and either holds the lock with it, gives up
// (try), or waits for its predecessor to go. It returns errVanished to be called
// again.
func (d *Driver) step(ctx context.Context, h *holding, wait bool) (driver.Grant, error) {
	d.mu.Lock()
	hasNode := h.name != ""
	d.mu.Unlock()
	first := false
	start := time.Now()
	if !hasNode {
		var err error
		if first, err = d.create(ctx, h); err != nil {
			return driver.Grant{}, err
		}
	}
	d.mu.Lock()
	parent, name := h.parent, h.name
	d.mu.Unlock()
	pred := ""
	if !first {
		start = time.Now()
		children, err := call(d, ctx, func() ([]string, error) {
			c, _, err := d.conn.Children(parent)
			return c, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			d.forget(h, name)
			return driver.Grant{}, errVanished
		}
		if err != nil {
			return driver.Grant{}, d.closedOr(err)
		}
		var present bool
		if pred, present = predecessor(children, name); !present {
			// Deleted, or gone with an expired session: queue again.
			d.forget(h, name)
			return driver.Grant{}, errVanished
		}
	}
	if pred == "" {
		return d.grant(ctx, h, start)
	}
	if !wait {
		d.drop(ctx, h)
		return driver.Grant{}, driver.ErrLocked
	}
	return driver.Grant{}, d.waitFor(ctx, parent+"/"+pred)
}

// holding returns req's holding, making it if new. held is true, with the
// grant, when req already holds the lock (a retry after a lost reply).
func (d *Driver) holding(req *driver.Request) (h *holding, g driver.Grant, held bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, driver.Grant{}, false, driver.ErrClosed
	}
	k := holdKey{req.Key, req.Owner}
	if h := d.holds[k]; h != nil {
		h.req = req
		if h.state == stateGranted || h.state == stateReleasing {
			return h, driver.Grant{Token: uint64(h.czxid), Start: h.start}, true, nil
		}
		return h, driver.Grant{}, false, nil
	}
	h = &holding{req: req, parent: d.root + "/" + escapeName(req.Key)}
	d.holds[k] = h
	return h, driver.Grant{}, false, nil
}

// maxCreateAttempts bounds how often one create is retried when the key node
// keeps vanishing under it (the server reaps empty containers).
const maxCreateAttempts = 8

// create makes h's lock node: a protected, ephemeral, sequential node under the
// key node, which is made as a container when missing. It reports first when
// the node is certainly first in its queue: it has sequence 0 in a key node this
// call made, so no other node was ever created there.
//
// A create whose reply was lost leaves h.unsure set; the next call looks for a
// node with h's marker before creating another, so the lost node is used rather
// than orphaned.
func (d *Driver) create(ctx context.Context, h *holding) (first bool, err error) {
	for attempt := 1; ; attempt++ {
		d.mu.Lock()
		parent, marker, unsure := h.parent, h.marker, h.unsure
		d.mu.Unlock()
		if unsure {
			name, err := d.findMarked(ctx, parent, marker)
			if err != nil {
				return false, d.closedOr(err)
			}
			d.mu.Lock()
			h.unsure = false
			if name != "" {
				h.name = name
				d.mu.Unlock()
				return false, nil
			}
			d.mu.Unlock()
			// Never made: create again under the same marker, as Curator does.
		} else {
			marker = newMarker()
			d.mu.Lock()
			h.marker = marker
			d.mu.Unlock()
		}

		made := false
		if !d.knownParent(parent) {
			if made, err = d.ensureParent(ctx, parent); err != nil {
				return false, d.closedOr(err)
			}
		}
		session := d.conn.SessionID()
		d.mu.Lock()
		h.sent = true
		d.mu.Unlock()
		path, err := call(d, ctx, func() (string, error) {
			return d.conn.Create(parent+"/"+nodePrefix(marker), nil, zk.FlagEphemeral|zk.FlagSequence, d.acl)
		}, func(path string, err error) {
			d.createAbandoned(h, marker, session, path, err)
		})
		if !errors.As(err, new(abandonedError)) {
			d.mu.Lock()
			h.sent = false // returned while we waited; else createAbandoned clears it
			d.mu.Unlock()
		}
		switch {
		case err == nil:
			name := path[len(parent)+1:]
			d.mu.Lock()
			h.name = name
			d.mu.Unlock()
			d.rememberParent(parent)
			seq, _ := sequence(name)
			return made && seq == 0, nil
		case errors.Is(err, zk.ErrNoNode) && attempt < maxCreateAttempts:
			// The key node went between our check and our create: the server
			// reaps empty containers. Make it again.
			d.forgetParent(parent)
		case ambiguous(err):
			d.mu.Lock()
			h.unsure = true
			d.mu.Unlock()
			return false, d.closedOr(err)
		default:
			return false, d.closedOr(err)
		}
	}
}

// createAbandoned runs when a create finishes after its caller gave up (its
// context ended). A node it made belongs to h if h still wants it, and is an
// orphan otherwise.
func (d *Driver) createAbandoned(h *holding, marker string, session int64, path string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h.sent = false
	if d.closed {
		return // the session ends, or Close deleted what it could
	}
	wanted := d.holds[holdKey{h.req.Key, h.req.Owner}] == h && h.marker == marker && h.name == ""
	switch {
	case err == nil && wanted:
		h.name = path[len(h.parent)+1:]
		h.unsure = false
	case err == nil:
		d.orphans = append(d.orphans, orphan{path: path, session: d.conn.SessionID()})
	case ambiguous(err) && wanted:
		h.unsure = true
	case ambiguous(err):
		d.orphans = append(d.orphans, orphan{parent: h.parent, marker: marker, session: session})
	default:
		return
	}
	d.nudge()
}

// findMarked returns the name of the node under parent made with marker, or "".
func (d *Driver) findMarked(ctx context.Context, parent, marker string) (string, error) {
	children, err := call(d, ctx, func() ([]string, error) {
		c, _, err := d.conn.Children(parent)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for _, c := range children {
		if hasMarker(c, marker) {
			return c, nil
		}
	}
	return "", nil
}

// ensureParent makes the key node parent as a container node, which the server
// deletes once it is empty, so that locking on ever new keys leaves nothing
// behind. made is true if this call created it.
func (d *Driver) ensureParent(ctx context.Context, parent string) (made bool, err error) {
	for attempt := 0; ; attempt++ {
		_, err := call(d, ctx, func() (string, error) {
			return d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl)
		}, nil)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, zk.ErrNodeExists):
			return false, nil
		case errors.Is(err, zk.ErrNoNode) && attempt == 0:
			// The prefix itself is missing (deleted by an operator, or a
			// Driver from New that has not made it yet).
			if err := d.ensureRoot(ctx); err != nil {
				return false, err
			}
		default:
			return false, fmt.Errorf("zkdriver: create key node: %w", err)
		}
	}
}

// ensureRoot makes the chroot and prefix nodes where missing. They are
// persistent: there is one of each, and a container prefix would be reaped
// whenever no key is locked, costing the next lock a round trip.
func (d *Driver) ensureRoot(ctx context.Context) error {
	for _, p := range d.rootPath {
		_, err := call(d, ctx, func() (string, error) { return d.conn.Create(p, nil, 0, d.acl) }, nil)
		if errors.Is(err, zk.ErrNoAuth) {
			// The server checks the parent's ACL before whether p exists: an
			// administrator may have made p for us under a node we cannot write.
			var ok bool
			ok, err = call(d, ctx, func() (bool, error) { ok, _, err := d.conn.Exists(p); return ok, err }, nil)
			if err == nil && !ok {
				err = zk.ErrNoAuth
			}
		}
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zkdriver: create %s: %w", p, err)
		}
	}
	return nil
}

// grant makes h held: it reads its node's creation zxid (the fencing token) and
// owning session, and, on a connection the driver owns, leaves a watch on it so
// that its deletion is noticed at once.
func (d *Driver) grant(ctx context.Context, h *holding, start time.Time) (driver.Grant, error) {
	d.mu.Lock()
	path, name := h.path(), h.name
	d.mu.Unlock()
	st, err := call(d, ctx, func() (*zk.Stat, error) {
		if d.ownConn {
			_, st, _, err := d.conn.GetW(path)
			return st, err
		}
		ok, st, err := d.conn.Exists(path)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return st, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		d.forget(h, name)
		return driver.Grant{}, errVanished
	}
	if err != nil {
		return driver.Grant{}, d.closedOr(err)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.Grant{}, driver.ErrClosed
	}
	h.state = stateGranted
	h.czxid, h.session, h.start = st.Czxid, st.EphemeralOwner, start
	d.byPath[path] = h
	d.mu.Unlock()
	d.nudge() // the monitor looks after held locks
	return driver.Grant{Token: uint64(st.Czxid), Start: start}, nil
}

// waitFor waits until the node at path is deleted (or its watch ends with the
// session or the connection).
func (d *Driver) waitFor(ctx context.Context, path string) error {
	ch, err := call(d, ctx, func() (<-chan zk.Event, error) {
		_, _, ch, err := d.conn.GetW(path)
		return ch, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return errVanished // already gone: look again
	}
	if err != nil {
		return d.closedOr(err)
	}
	select {
	case <-ch:
		return errVanished
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return driver.ErrClosed
	}
}

// forget notes that h's node name is gone, so the next step queues again.
func (d *Driver) forget(h *holding, name string) {
	d.mu.Lock()
	if h.name == name {
		h.name = ""
		h.marker = ""
		h.unsure = false
	}
	d.mu.Unlock()
}

// drop deletes h's node after a TryAcquire found others ahead, and forgets h.
func (d *Driver) drop(ctx context.Context, h *holding) {
	d.mu.Lock()
	path := h.path()
	d.removeLocked(h)
	d.mu.Unlock()
	if err := d.deleteNode(ctx, path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		d.addOrphan(orphan{path: path, session: d.conn.SessionID()})
	}
}

// deleteNode deletes our node at path, whatever its version.
func (d *Driver) deleteNode(ctx context.Context, path string) error {
	_, err := call(d, ctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(path, -1) }, nil)
	return err
}

// removeLocked forgets h. d.mu is held.
func (d *Driver) removeLocked(h *holding) {
	k := holdKey{h.req.Key, h.req.Owner}
	if d.holds[k] == h {
		delete(d.holds, k)
	}
	if h.name != "" && d.byPath[h.path()] == h {
		delete(d.byPath, h.path())
	}
	h.state = stateDone
}

// maxKnownParents bounds the memory of key nodes known to exist.
const maxKnownParents = 4096

// knownParent reports whether the key node parent was seen to exist, so a
// create can go straight to the lock node (the common case for a busy key).
func (d *Driver) knownParent(parent string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.parents[parent]
	return ok
}

func (d *Driver) rememberParent(parent string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.parents) >= maxKnownParents {
		clear(d.parents) // crude, but bounded; a miss costs one round trip
	}
	d.parents[parent] = struct{}{}
}

func (d *Driver) forgetParent(parent string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.parents, parent)
}

func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// closedOr returns driver.ErrClosed if the driver was closed (go-zookeeper then
// reports its own closing errors), and err otherwise.
func (d *Driver) closedOr(err error) error {
	if d.isClosed() {
		return driver.ErrClosed
	}
	return err
}

// backoff spaces retries while disconnected: 10 ms doubling to 500 ms, with
// jitter.
type backoff struct{ step time.Duration }

func (b *backoff) wait(ctx context.Context, done <-chan struct{}) error {
	if b.step == 0 {
		b.step = 10 * time.Millisecond
	}
	d := b.step/2 + rand.N(b.step/2+1)
	if b.step *= 2; b.step > 500*time.Millisecond {
		b.step = 500 * time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return driver.ErrClosed
	}
}
