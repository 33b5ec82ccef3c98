package zkdriver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// A semaphore is Curator's InterProcessSemaphoreV2 (see the package doc):
//
//	<key node>/locks/_c_<marker>-lock-<seq>    a mutex that admits one acquirer at a time
//	<key node>/leases/_c_<marker>-lease-<seq>  one per permit holder or acquirer
//
// An Acquire takes the locks mutex, creates its lease, and lists the leases
// (watching them) until at most n exist, its own among them; then it holds its
// lease and gives the mutex up. Only the acquirer holding the mutex waits, so a
// freed permit goes to it, in the mutex's (arrival) order.
const (
	locksNode  = "locks"
	leasesNode = "leases"
)

// gateSuffix makes the holdKey of a semaphore acquirer's locks-mutex node
// from its request's key: 0xff never occurs in a key (valid UTF-8), so it
// meets no user's hold.
const gateSuffix = "\xff" + locksNode

// permitsData is what a semaphore's key node holds while distlock uses it:
// the number of permits, so that a request with another n is refused.
func permitsData(n int) []byte { return []byte("distlock permits=" + strconv.Itoa(n)) }

// parsePermits reads permitsData; ok is false for anything else (an empty
// node, as Curator leaves it).
func parsePermits(b []byte) (n int, ok bool) {
	rest, found := bytes.CutPrefix(b, []byte("distlock permits="))
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(string(rest))
	return n, err == nil && n > 0
}

// acquirePermit takes one of h's n permits. Both TryAcquire and Acquire
// first make a lease without the locks mutex and keep it only if at most n
// leases exist: the count alone keeps the holders to n (whichever of n+1
// holders listed last would have seen all n+1), and the mutex only orders
// waiters. So permits are taken in parallel while some are free, not one
// acquirer at a time behind the mutex, and a newcomer cannot pass a waiter,
// whose lease is counted. Only an Acquire that finds none free takes the
// mutex and waits, as Curator's acquirers do.
func (d *Driver) acquirePermit(ctx context.Context, h *holding, wait bool) (driver.Grant, error) {
	for {
		g, err := d.leaseStep(ctx, h, nil)
		if errors.Is(err, errVanished) {
			continue
		}
		if !wait || !errors.Is(err, driver.ErrLocked) {
			return g, err
		}
		break
	}
	// The attempt's lease went with its holding: wait with a new one.
	h, g, held, err := d.holding(h.req)
	if held || err != nil {
		return g, err
	}
	m, err := d.gate(h)
	if err != nil {
		return driver.Grant{}, err
	}
	defer d.openGate(m)
	for {
		_, err := d.step(ctx, m, true)
		if err == nil {
			break
		}
		if !errors.Is(err, errVanished) {
			return driver.Grant{}, err
		}
	}
	for {
		g, err := d.leaseStep(ctx, h, m)
		if !errors.Is(err, errVanished) {
			return g, err
		}
	}
}

// gate returns the holding of h's locks-mutex node, making it if new.
func (d *Driver) gate(h *holding) (*holding, error) {
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.OpenLocked(); err != nil {
		return nil, err
	}
	k := holdKey{h.req.Key + gateSuffix, h.req.Owner}
	if m := d.held.GetLocked(k); m != nil {
		return m, nil
	}
	req := &driver.Request{Key: k.key, Owner: k.owner, TTL: h.req.TTL, Lost: driver.LostFunc(func(error) {})}
	m := &holding{req: req, parent: path.Dir(h.parent) + "/" + locksNode, kind: lockName}
	_ = d.held.PutLocked(k, m) // OpenLocked was checked under this lock
	return m, nil
}

// gateGrace bounds how long the release of a locks-mutex node waits for a
// disconnected client; a node not deleted then is left to the orphan sweep
// (or goes with the session).
const gateGrace = closeGrace

// openGate gives up the locks-mutex node m, held or still queued.
func (d *Driver) openGate(m *holding) {
	ctx, cancel := context.WithTimeout(d.ctx, gateGrace)
	defer cancel()
	err := d.Release(ctx, m.req)
	if err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrClosed) {
		return
	}
	d.held.Lock()
	if d.held.GetLocked(holdKey{m.req.Key, m.req.Owner}) != m || m.name() == "" {
		d.held.Unlock()
		return
	}
	o := orphan{path: m.path(), session: m.ownerOrCreator()}
	d.removeLocked(m)
	d.held.Unlock()
	d.addOrphan(o) // deleted once the connection is back
}

// leaseStep makes sure h has a lease node and holds with it if at most
// n leases exist. Otherwise TryAcquire (gate nil) gives up, and
// Acquire, which holds the locks mutex gate, waits for the leases to change.
// It returns errVanished to be called again.
func (d *Driver) leaseStep(ctx context.Context, h *holding, gate *holding) (driver.Grant, error) {
	d.held.Lock()
	hasNode := h.name() != ""
	d.held.Unlock()
	start := time.Now()
	var lst *listing
	if !hasNode {
		var err error
		if lst, err = d.create(ctx, h); err != nil {
			return driver.Grant{}, err
		}
	}
	var changed <-chan zk.Event
	if lst == nil || gate != nil {
		start = time.Now()
		lst, changed = d.listWatch(ctx, h.parent, gate != nil)
	}
	if _, err := d.read(h, lst); err != nil {
		return driver.Grant{}, err
	}
	// Curator's rule: hold when the leases, ours among them, are at most n.
	if len(lst.children) <= h.permits() {
		if err := d.fence(ctx, h, lst.children); err != nil {
			return driver.Grant{}, err
		}
		return d.grant(ctx, h, start)
	}
	if gate == nil {
		d.drop(ctx, h)
		return driver.Grant{}, driver.ErrLocked
	}
	select {
	case <-changed:
		return driver.Grant{}, errVanished // look again
	case <-ctx.Done():
		return driver.Grant{}, ctx.Err()
	case <-d.held.Done():
		return driver.Grant{}, driver.ErrClosed
	}
}

// listWatch lists parent's children, with a watch on them if watch.
func (d *Driver) listWatch(ctx context.Context, parent string, watch bool) (*listing, <-chan zk.Event) {
	if !watch {
		return d.list(ctx, parent), nil
	}
	type answer struct {
		lst *listing
		ch  <-chan zk.Event
	}
	a, err := call(d, ctx, func() (answer, error) {
		c, st, ch, err := d.conn.ChildrenW(parent)
		return answer{&listing{children: c, stat: st}, ch}, err
	}, nil)
	if err != nil {
		return &listing{err: err}, nil
	}
	a.lst.session = d.conn.SessionID()
	return a.lst, a.ch
}

// fence gives h a token of its own, a zxid no grant before it had: the zxid
// of a write to the key node, made once h's node is known to hold. A shared
// hold writes nothing into it; a permit writes the semaphore's n there, after
// checking that the n already there, if any other lease exists (leases lists
// them, ours included), is h's: so a request with another n is
// driver.ErrInvalidArgument while the semaphore is in use, and its lease
// goes.
func (d *Driver) fence(ctx context.Context, h *holding, leases []string) error {
	d.held.Lock()
	name, keyNode := h.name(), h.parent
	d.held.Unlock()
	if h.permits() > 1 {
		keyNode = path.Dir(h.parent)
	}
	for {
		version := int32(-1)
		var data []byte
		if h.permits() > 1 {
			type answer struct {
				data []byte
				st   *zk.Stat
			}
			a, err := call(d, ctx, func() (answer, error) {
				b, st, err := d.conn.Get(keyNode)
				return answer{b, st}, err
			}, nil)
			if err != nil {
				return d.fenceError(h, name, err)
			}
			if n, ok := parsePermits(a.data); ok && n != h.permits() && len(leases) > 1 {
				d.drop(ctx, h)
				return fmt.Errorf("%w: zkdriver: the semaphore is in use with %d permits, not %d", driver.ErrInvalidArgument, n, h.permits())
			}
			version, data = a.st.Version, permitsData(h.permits())
		}
		st, err := call(d, ctx, func() (*zk.Stat, error) { return d.conn.Set(keyNode, data, version) }, nil)
		if errors.Is(err, zk.ErrBadVersion) {
			continue // another grant wrote first: check again
		}
		if err != nil {
			return d.fenceError(h, name, err)
		}
		d.held.Lock()
		if h.name() == name {
			h.a().fence = st.Mzxid
		}
		d.held.Unlock()
		return nil
	}
}

// fenceError is fence's answer to a failed request: a key node that is gone
// took h's node with it.
func (d *Driver) fenceError(h *holding, name string, err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		d.forget(h, name)
		return errVanished
	}
	return d.closedOr(err)
}
