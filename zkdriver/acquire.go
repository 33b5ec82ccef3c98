package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"path"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// The recipe is ZooKeeper's own (recipes.html, "Locks") in Curator's layout:
//
//  1. create <key node>/_c_<marker>-lock-<seq>, ephemeral and sequential, making
//     the key node as a container if it is missing;
//  2. list the key node's children; if ours has the lowest sequence, it is held;
//  3. otherwise watch only the next lower node (no herd effect) and go to 2 when
//     it goes.

// TryAcquire makes one attempt: it queues a node, and removes it again and
// returns driver.ErrLocked if another owner is ahead in the queue. A failure
// of the connection or session is returned marked driver.ErrUnavailable.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req, false)
	return g, unavailable(err)
}

// Acquire queues a node and waits until every node ahead of it has gone,
// woken by a watch on its predecessor. A failure of the connection or session
// is returned marked driver.ErrUnavailable, and the node stays queued: when the
// portable layer calls again for the same request, a session that survived
// keeps its place in the queue, and after an expired one the node is queued
// again in the new session.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req, true)
	return g, unavailable(err)
}

// errVanished says our node disappeared before we could hold it; the caller
// queues again.
var errVanished = errors.New("zkdriver: lock node vanished")

func (d *Driver) acquire(ctx context.Context, req *driver.Request, wait bool) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	if req.Shared && req.Permits > 1 {
		return driver.Grant{}, fmt.Errorf("%w: shared and permits together", driver.ErrInvalidArgument)
	}
	h, g, held, err := d.holding(req)
	if held || err != nil {
		return g, err
	}
	if h.permits() > 1 {
		return d.acquirePermit(ctx, h, wait)
	}
	for {
		g, err := d.step(ctx, h, wait)
		if !errors.Is(err, errVanished) {
			return g, err
		}
	}
}

// step makes sure h has a node, and either holds the lock with it, gives up
// (try), or waits for the node ahead of it to go. It returns errVanished to be
// called again.
func (d *Driver) step(ctx context.Context, h *holding, wait bool) (driver.Grant, error) {
	d.held.Lock()
	hasNode := h.name() != ""
	d.held.Unlock()
	var lst *listing
	start := time.Now()
	if !hasNode {
		var err error
		if lst, err = d.create(ctx, h); err != nil {
			return driver.Grant{}, err
		}
	}
	if lst == nil {
		start = time.Now()
		lst = d.list(ctx, h.parent)
	}
	pred, err := d.read(h, lst)
	if err != nil {
		return driver.Grant{}, err
	}
	if pred == "" {
		if h.kind == readName {
			// Readers hold together, so the listing's pzxid may be another
			// reader's token too: take a zxid of our own.
			if err := d.fence(ctx, h, nil); err != nil {
				return driver.Grant{}, err
			}
		}
		return d.grant(ctx, h, start)
	}
	if !wait {
		d.drop(ctx, h)
		return driver.Grant{}, driver.ErrLocked
	}
	return driver.Grant{}, d.waitFor(ctx, h, pred)
}

// listing is a key node's children with the key node's stat.
type listing struct {
	children []string
	stat     *zk.Stat
	session  int64 // the live session once the answer came
	err      error
}

func (d *Driver) list(ctx context.Context, parent string) *listing {
	lst, err := call(d, ctx, func() (*listing, error) {
		c, st, err := d.conn.Children(parent)
		return &listing{children: c, stat: st}, err
	}, nil)
	if err != nil {
		return &listing{err: err}
	}
	lst.session = d.conn.SessionID()
	return lst
}

// read takes from a listing of h's key node the node h waits for ("" if none
// is ahead). If h's node was created in the session that answered the listing
// (no session change in between), that session owns it.
func (d *Driver) read(h *holding, lst *listing) (pred string, err error) {
	d.held.Lock()
	name, createdIn := h.name(), h.a().createdIn
	d.held.Unlock()
	if errors.Is(lst.err, zk.ErrNoNode) {
		d.forget(h, name) // gone with its key node, or deleted
		return "", errVanished
	}
	if lst.err != nil {
		return "", d.closedOr(lst.err)
	}
	var present bool
	if h.kind == leaseName {
		present = slices.Contains(lst.children, name) // leases have no order: they are counted
	} else {
		pred, present = predecessor(lst.children, name)
	}
	if !present {
		// Deleted, or gone with an expired session: queue again.
		d.forget(h, name)
		return "", errVanished
	}
	d.held.Lock()
	if h.name() == name {
		if createdIn != 0 && lst.session == createdIn {
			h.a().owner = createdIn
		}
		if lst.stat != nil {
			h.a().pzxid, h.a().viewed = lst.stat.Pzxid, true
		}
	}
	d.held.Unlock()
	return pred, nil
}

// readOwner reads which session owns h's node called name.
func (d *Driver) readOwner(ctx context.Context, h *holding, name string) error {
	st, err := call(d, ctx, func() (*zk.Stat, error) {
		ok, st, err := d.conn.Exists(h.parent + "/" + name)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return st, err
	}, nil)
	if err != nil {
		return err
	}
	d.held.Lock()
	if h.name() == name {
		h.a().owner = st.EphemeralOwner
	}
	d.held.Unlock()
	return nil
}

// holding returns req's holding, making it if new. held is true, with the
// grant, when req already holds the lock (a retry after a lost reply).
func (d *Driver) holding(req *driver.Request) (h *holding, g driver.Grant, held bool, err error) {
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.OpenLocked(); err != nil {
		return nil, driver.Grant{}, false, err
	}
	k := holdKey{req.Key, req.Owner}
	if h := d.held.GetLocked(k); h != nil {
		h.req = req
		if h.state == stateGranted || h.state == stateReleasing {
			return h, driver.Grant{Token: h.token, Start: d.timeAt(h.start)}, true, nil
		}
		return h, driver.Grant{}, false, nil
	}
	h = &holding{req: req, parent: d.root + "/" + escapeName(req.Key), kind: d.exclusive}
	switch {
	case req.Shared:
		h.kind = readName
	case req.Permits > 1:
		h.kind = leaseName
		h.parent += "/" + leasesNode
	}
	_ = d.held.PutLocked(k, h) // OpenLocked was checked under this lock
	return h, driver.Grant{}, false, nil
}

// maxCreateAttempts bounds how often one create is retried when the key node
// keeps vanishing under it (the server reaps empty containers).
const maxCreateAttempts = 8

// create makes h's lock node: a protected, ephemeral, sequential node under the
// key node, which is made as a container when missing. On a key node it has not
// seen it also lists the queue in the same round trip (createFresh), and
// returns that listing.
//
// A create whose reply was lost leaves unsure set; the next call looks for a
// node with h's marker before creating another, so the lost node is used rather
// than orphaned.
func (d *Driver) create(ctx context.Context, h *holding) (*listing, error) {
	for attempt := 1; ; attempt++ {
		d.held.Lock()
		parent, marker, unsure := h.parent, h.a().marker, h.a().unsure
		d.held.Unlock()
		if unsure {
			name, err := d.findMarked(ctx, parent, marker)
			if err != nil {
				return nil, d.closedOr(err)
			}
			d.held.Lock()
			h.a().unsure = false
			if name != "" {
				h.setName(name)
				a := h.a()
				a.createdIn, a.owner, a.viewed, a.fence = 0, 0, false, 0 // its owner is unknown: read it
				d.held.Unlock()
				return nil, nil
			}
			d.held.Unlock()
			// Never made: create again under the same marker, as Curator does.
		} else {
			marker = newMarker()
			d.held.Lock()
			h.a().marker = marker
			d.held.Unlock()
		}

		var (
			path      string
			lst       *listing
			err       error
			parentErr error
			known     = d.knownParent(parent)
			session   = d.conn.SessionID()
			c         = nodeCreate{parent + "/" + nodePrefix(marker, h.kind), marker, session}
		)
		switch {
		case known:
			path, err = d.createNode(ctx, h, c)
		case d.ownConn:
			path, lst, parentErr, err = d.createFresh(ctx, h, parent, c)
		default:
			if err = d.ensureParent(ctx, parent); err != nil {
				return nil, d.closedOr(err)
			}
			path, err = d.createNode(ctx, h, c)
		}
		switch {
		case errors.Is(err, errNotSent):
			return nil, d.closedOr(fmt.Errorf("zkdriver: create key node: %w", parentErr))
		case err == nil:
			d.held.Lock()
			h.setNode(path)
			a := h.a()
			a.createdIn, a.owner, a.viewed, a.fence = session, 0, false, 0
			d.held.Unlock()
			d.rememberParent(parent)
			return lst, nil
		case errors.Is(err, zk.ErrNoNode) && attempt < maxCreateAttempts:
			// The key node went between our check and our create (the server
			// reaps empty containers), or could not be made because the prefix
			// is missing. Make them again.
			d.forgetParent(parent)
			if errors.Is(parentErr, zk.ErrNoNode) {
				if err := d.ensureAbove(ctx, parent); err != nil {
					return nil, d.closedOr(err)
				}
			}
		case ambiguous(err):
			d.held.Lock()
			h.a().unsure = true
			d.held.Unlock()
			return nil, d.closedOr(err)
		default:
			if parentErr != nil {
				err = fmt.Errorf("zkdriver: create key node: %w", parentErr)
			}
			return nil, d.closedOr(err)
		}
	}
}

// nodeCreate is one create of a lock node: at path (ZooKeeper appends the
// sequence number), named with marker, sent in session.
type nodeCreate struct {
	path, marker string
	session      int64
}

// createNode creates h's lock node as c says. If the caller gives up first,
// createAbandoned settles what the create did.
func (d *Driver) createNode(ctx context.Context, h *holding, c nodeCreate) (string, error) {
	d.held.Lock()
	h.a().sent = true
	var data []byte
	if h.req.Label != "" {
		// The holder's label, for Inspect: Curator writes its client's
		// address here, zk.Lock nothing.
		data = []byte(h.req.Label)
	}
	d.held.Unlock()
	path, err := call(d, ctx, func() (string, error) {
		return d.conn.Create(c.path, data, zk.FlagEphemeral|zk.FlagSequence, d.acl)
	}, func(path string, err error) {
		d.createAbandoned(h, c.marker, c.session, path, err)
	})
	if !kit.GaveUp(err) {
		d.held.Lock()
		h.a().sent = false // returned while we waited; else createAbandoned clears it
		d.held.Unlock()
	}
	return path, err
}

// createFresh makes the key node, h's lock node in it, and lists the queue,
// in one round trip instead of three: it sends each request as soon as the one
// before is on the wire, and the server applies a session's requests in the
// order they arrive. parentErr is the key node's create's error (nil if it was
// made or existed).
func (d *Driver) createFresh(ctx context.Context, h *holding, parent string, c nodeCreate) (path string, lst *listing, parentErr, err error) {
	parentDone, createDone := make(chan struct{}), make(chan struct{})
	written := d.wire.expect(opCreateContainer, parent)
	go func() {
		defer close(parentDone)
		_, parentErr = call(d, ctx, func() (string, error) {
			return d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl)
		}, nil)
	}()
	if !d.sent(written, parentDone, opCreateContainer, parent) && transient(parentErr) {
		// Not even the first request went out (disconnected): the others
		// would only wait for the same failure.
		return "", nil, parentErr, errNotSent
	}

	written = d.wire.expect(opCreate, c.path)
	go func() {
		defer close(createDone)
		path, err = d.createNode(ctx, h, c)
	}()
	if d.sent(written, createDone, opCreate, c.path) || err == nil {
		lst = d.list(ctx, parent)
	}
	<-parentDone
	<-createDone
	if errors.Is(parentErr, zk.ErrNodeExists) {
		parentErr = nil
	}
	if err != nil {
		lst = nil
	}
	return path, lst, parentErr, err
}

// sent waits until the request of type typ on path is on the wire, or the call
// that sends it has returned (it failed, perhaps before sending), and reports
// whether it was seen on the wire.
func (d *Driver) sent(written, returned chan struct{}, typ int32, path string) bool {
	select {
	case <-written:
		return true
	case <-returned:
		d.wire.forget(typ, path, written)
		select {
		case <-written:
			return true
		default:
			return false
		}
	}
}

// errNotSent is createFresh's answer when its lock node's create was never
// sent: its key node's create failed first, with parentErr.
var errNotSent = errors.New("zkdriver: lock node create not sent")

// createAbandoned runs when a create finishes after its caller gave up (its
// context ended). A node it made belongs to h if h still wants it, and is an
// orphan otherwise.
func (d *Driver) createAbandoned(h *holding, marker string, session int64, path string, err error) {
	d.held.Lock()
	defer d.held.Unlock()
	h.a().sent = false
	if d.held.ClosedLocked() {
		return // the session ends, or Close deleted what it could
	}
	wanted := d.held.GetLocked(holdKey{h.req.Key, h.req.Owner}) == h && h.a().marker == marker && h.name() == ""
	switch {
	case err == nil && wanted:
		h.setNode(path)
		h.a().unsure = false
	case err == nil:
		d.orphans = append(d.orphans, orphan{path: path, session: d.conn.SessionID()})
	case ambiguous(err) && wanted:
		h.a().unsure = true
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
// behind.
func (d *Driver) ensureParent(ctx context.Context, parent string) error {
	for attempt := 0; ; attempt++ {
		_, err := call(d, ctx, func() (string, error) {
			return d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl)
		}, nil)
		switch {
		case err == nil || errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode) && attempt == 0:
			// The prefix itself is missing (deleted by an operator, or a
			// Driver from New that has not made it yet), or, for a
			// semaphore's nodes, the key node.
			if err := d.ensureAbove(ctx, parent); err != nil {
				return err
			}
		default:
			return fmt.Errorf("zkdriver: create key node: %w", err)
		}
	}
}

// ensureAbove makes the node that parent lives in: the root, or for a
// semaphore's locks and leases nodes the key node.
func (d *Driver) ensureAbove(ctx context.Context, parent string) error {
	if up := path.Dir(parent); up != d.root {
		return d.ensureParent(ctx, up)
	}
	return d.ensureRoot(ctx)
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

// grant makes h held. The fencing token is the key node's pzxid in the listing
// that showed h's node first: the zxid of the last change to the queue before
// the lock became ours. It is at least our node's creation zxid, and strictly
// greater than the previous holder's token, because that holder's node was
// deleted (a change to the queue, with a later zxid than anything the
// previous holder's own listing saw) before our listing. Like every zxid it
// grows across the ensemble, across restarts and across a key node removed and
// made again, where sequence numbers restart. Reading it costs nothing: the
// listing returns it.
func (d *Driver) grant(ctx context.Context, h *holding, start time.Time) (driver.Grant, error) {
	d.held.Lock()
	name, known := h.name(), h.a().owner != 0
	d.held.Unlock()
	if !known {
		err := d.readOwner(ctx, h, name)
		if errors.Is(err, zk.ErrNoNode) {
			d.forget(h, name)
			return driver.Grant{}, errVanished
		}
		if err != nil {
			return driver.Grant{}, d.closedOr(err)
		}
	}
	live := d.conn.SessionID()
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.OpenLocked(); err != nil {
		return driver.Grant{}, err
	}
	if h.name() != name || !h.a().viewed {
		return driver.Grant{}, errVanished
	}
	if h.a().owner != live {
		// A node of a session that ended (the server deletes it any moment):
		// not a lock. Queue again in the live session.
		h.setName("")
		a := h.a()
		*a = acquiring{sent: a.sent}
		return driver.Grant{}, errVanished
	}
	h.state = stateGranted
	a := h.a()
	h.token, h.session, h.start = uint64(a.pzxid), a.owner, d.at(start)
	if a.fence != 0 {
		h.token = uint64(a.fence)
	}
	if !a.sent {
		h.acq = nil // a held lock keeps no acquisition state
	}
	first := len(d.byPath) == 0
	d.byPath[h.path()] = h
	if first || d.ownConn && !d.armWake {
		d.nudge() // the monitor looks after held locks: heartbeats, watches
	}
	return driver.Grant{Token: h.token, Start: start}, nil
}

// waitFor waits until the node pred ahead of h's node is deleted (or its watch
// ends otherwise).
func (d *Driver) waitFor(ctx context.Context, h *holding, pred string) error {
	ch, err := call(d, ctx, func() (<-chan zk.Event, error) {
		_, _, ch, err := d.conn.GetW(h.parent + "/" + pred)
		return ch, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return errVanished // gone already: look again
	}
	if err != nil {
		return d.closedOr(err)
	}
	select {
	case ev := <-ch:
		// The node's deletion is ZooKeeper's notification; any other event
		// (the watch ended without it: the session expired, the client
		// closed) makes the waiter look again on its own: the fallback.
		src := driver.WakeTimer
		if ev.Type == zk.EventNodeDeleted {
			src = driver.WakeNotified
		}
		driver.Woke(ctx, src)
		return errVanished
	case <-ctx.Done():
		return ctx.Err()
	case <-d.held.Done():
		return driver.ErrClosed
	}
}

// forget notes that h's node name is gone, so the next step queues again.
func (d *Driver) forget(h *holding, name string) {
	d.held.Lock()
	if h.name() == name {
		h.setName("")
		a := h.a()
		*a = acquiring{sent: a.sent}
	}
	d.held.Unlock()
}

// drop deletes h's node after a TryAcquire found others ahead, and forgets h.
func (d *Driver) drop(ctx context.Context, h *holding) {
	d.held.Lock()
	path := h.path()
	d.removeLocked(h)
	d.held.Unlock()
	if err := d.deleteNode(ctx, path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		d.addOrphan(orphan{path: path, session: d.conn.SessionID()})
	}
}

// deleteNode deletes our node at path, whatever its version.
func (d *Driver) deleteNode(ctx context.Context, path string) error {
	_, err := call(d, ctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(path, -1) }, nil)
	return err
}

// removeLocked forgets h. d.held is locked.
func (d *Driver) removeLocked(h *holding) {
	k := holdKey{h.req.Key, h.req.Owner}
	d.held.ForgetLocked(k, h)
	if h.name() != "" && d.byPath[h.path()] == h {
		delete(d.byPath, h.path())
	}
	h.state = stateDone
}

// maxKnownParents bounds the memory of key nodes known to exist.
const maxKnownParents = 4096

// The key nodes known to exist are remembered by a hash of their path, which
// keeps no path alive. Two paths that share a hash (odds of 2^-64 a pair)
// cost the second a failed create (zk.ErrNoNode), after which create forgets
// it and makes the key node.
func (d *Driver) parentHash(parent string) uint64 { return maphash.String(d.seed, parent) }

// knownParent reports whether the key node parent was seen to exist, so a
// create can go straight to the lock node (the common case for a busy key).
func (d *Driver) knownParent(parent string) bool {
	k := d.parentHash(parent)
	d.held.Lock()
	defer d.held.Unlock()
	_, ok := d.parents[k]
	return ok
}

func (d *Driver) rememberParent(parent string) {
	k := d.parentHash(parent)
	d.held.Lock()
	defer d.held.Unlock()
	if len(d.parents) >= maxKnownParents {
		clear(d.parents) // crude, but bounded; a miss costs one round trip
	}
	d.parents[k] = struct{}{}
}

func (d *Driver) forgetParent(parent string) {
	k := d.parentHash(parent)
	d.held.Lock()
	defer d.held.Unlock()
	delete(d.parents, k)
}

func (d *Driver) isClosed() bool {
	d.held.Lock()
	defer d.held.Unlock()
	return d.held.ClosedLocked()
}

// closedOr returns driver.ErrClosed if the driver was closed (go-zookeeper then
// reports its own closing errors), and err otherwise.
func (d *Driver) closedOr(err error) error {
	if d.isClosed() {
		return driver.ErrClosed
	}
	return err
}
