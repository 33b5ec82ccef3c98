package zkdriver

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// Inspection, eviction and watching read the same nodes the locks are: see
// the package documentation, "Inspection, eviction and leader election".

// member is one node of a key's queue.
type member struct {
	name   string
	seq    int32
	shared bool
}

// queueOf returns the queue nodes among a key node's children in queue order
// (other children, such as a semaphore's "locks" and "leases" nodes or a
// foreign client's, are left out).
func queueOf(children []string) []member {
	q := make([]member, 0, len(children))
	for _, c := range children {
		if seq, shared, ok := queued(c); ok {
			q = append(q, member{c, seq, shared})
		}
	}
	slices.SortFunc(q, func(a, b member) int {
		switch {
		case before(a.seq, b.seq):
			return -1
		case before(b.seq, a.seq):
			return 1
		}
		return 0
	})
	return q
}

// holdersIn returns how many nodes at the head of q hold by the queueing rule
// (predecessor): the readers before the first exclusive node, or that node
// when it is first.
func holdersIn(q []member) int {
	for i, m := range q {
		if !m.shared {
			if i == 0 {
				return 1
			}
			return i
		}
	}
	return len(q)
}

// tokenField is what Relabel adds to a JSON label to record the holder's
// token in its node, where an inspector can read it: the grant's token (a
// pzxid of a listing) is not recoverable from the tree afterwards.
const tokenField = `,"token":`

// withToken returns the node data that records label and token: a JSON
// object label gets the field "token" (which package lock's decoding
// ignores); any other label is stored as it is.
func withToken(label string, token uint64) string {
	if token == 0 || len(label) < 3 || label[0] != '{' || label[len(label)-1] != '}' {
		return label
	}
	return label[:len(label)-1] + tokenField + strconv.FormatUint(token, 10) + "}"
}

// splitToken reads node data written by withToken (or by a create, or by
// another client): the label, and the token if one is recorded.
func splitToken(data string) (label string, token uint64) {
	i := strings.LastIndex(data, tokenField)
	if i < 0 || data[0] != '{' || !strings.HasSuffix(data, "}") {
		return data, 0
	}
	n, err := strconv.ParseUint(data[i+len(tokenField):len(data)-1], 10, 64)
	if err != nil {
		return data, 0
	}
	return data[:i] + "}", n
}

// holderOf describes a holder from its node's name, data and stat.
func holderOf(name string, data []byte, st *zk.Stat, shared, exclusive bool) driver.Holder {
	label, token := splitToken(string(data))
	h := driver.Holder{Owner: name, Label: label, Shared: shared, Token: token}
	if token == 0 && exclusive {
		// Not recorded: the creation zxid, the token of an uncontended
		// grant and a lower bound of any other.
		h.Token = uint64(st.Czxid)
	}
	// The node's creation by the server's clock: the grant of an uncontended
	// holder, the start of the wait of one that waited (ZooKeeper records no
	// grant). Not the label's time, which Campaign rewrites once it has won:
	// a Since that changed then would make Observe report the same leader
	// twice.
	h.Since = time.UnixMilli(st.Ctime)
	return h
}

// watermark is the latest zxid that changed a key node's queue or data: at
// least every token granted on the key (a pzxid seen by a grant, or a write
// to the key node), and less than every token granted later.
func watermark(st *zk.Stat) uint64 { return uint64(max(st.Pzxid, st.Mzxid)) }

// each runs f(i) for i < n, up to batchParallel at once (go-zookeeper
// pipelines them on the one connection).
func each(n int, f func(i int)) {
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// nodeData is a node's data and stat.
type nodeData struct {
	data []byte
	st   *zk.Stat
}

func (d *Driver) get(ctx context.Context, path string) (nodeData, error) {
	return call(d, ctx, func() (nodeData, error) {
		b, st, err := d.conn.Get(path)
		return nodeData{b, st}, err
	}, nil)
}

func (d *Driver) children(ctx context.Context, path string) ([]string, *zk.Stat, error) {
	lst := d.list(ctx, path)
	return lst.children, lst.stat, lst.err
}

// view is what a key node holds at one moment.
type view struct {
	holders []string // paths of the holders' nodes, in queue order
	shared  bool     // the holders are readers
	lease   bool     // the holders are a semaphore's leases
	waiters int
	permits int
	token   uint64
}

// look reads key node keyNode: its queue (or its semaphore's leases) and who
// holds. A missing key node is a free key.
func (d *Driver) look(ctx context.Context, keyNode string) (view, error) {
	children, st, err := d.children(ctx, keyNode)
	if errors.Is(err, zk.ErrNoNode) {
		return view{}, nil
	}
	if err != nil {
		return view{}, err
	}
	v := view{token: watermark(st)}
	if slices.Contains(children, leasesNode) {
		return d.lookSemaphore(ctx, keyNode, v)
	}
	q := queueOf(children)
	n := holdersIn(q)
	for _, m := range q[:n] {
		v.holders = append(v.holders, keyNode+"/"+m.name)
	}
	v.shared = n > 0 && q[0].shared
	v.waiters = len(q) - n
	return v, nil
}

// lookSemaphore reads a semaphore: its n (distlock's record in the key
// node), its leases and its acquirers queued on the locks mutex, in one
// round trip (three pipelined reads).
func (d *Driver) lookSemaphore(ctx context.Context, keyNode string, v view) (view, error) {
	var (
		key            nodeData
		leases, locks  []string
		keyErr, lsErr  error
		lkErr          error
		leasesPath     = keyNode + "/" + leasesNode
		locksPath      = keyNode + "/" + locksNode
		leasesChildren = func() { leases, _, lsErr = d.children(ctx, leasesPath) }
	)
	each(3, func(i int) {
		switch i {
		case 0:
			key, keyErr = d.get(ctx, keyNode)
		case 1:
			leasesChildren()
		case 2:
			locks, _, lkErr = d.children(ctx, locksPath)
		}
	})
	for _, err := range []error{keyErr, lsErr, lkErr} {
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return view{}, err
		}
	}
	if keyErr == nil {
		if n, ok := parsePermits(key.data); ok {
			v.permits = n
		}
		v.token = max(v.token, watermark(key.st))
	}
	slices.SortFunc(leases, func(a, b string) int {
		sa, _ := sequenceAfter(a, leaseName)
		sb, _ := sequenceAfter(b, leaseName)
		switch {
		case before(sa, sb):
			return -1
		case before(sb, sa):
			return 1
		}
		return 0
	})
	// Leases hold while at most n exist; beyond n, the newest wait (the
	// acquirer holding the locks mutex) or are about to go (a TryAcquire
	// that found too many).
	n := len(leases)
	if v.permits > 0 {
		n = min(n, v.permits)
	}
	for _, l := range leases[:n] {
		v.holders = append(v.holders, leasesPath+"/"+l)
	}
	v.lease = true
	v.waiters = len(queueOf(locks))
	return v, nil
}

// Inspect implements driver.Inspector: one listing of the key node (three
// pipelined reads for a semaphore), then the holders' nodes read together.
// Waiters counts the queue's nodes that do not hold, exactly (a semaphore's:
// its acquirers queued on the locks mutex).
func (d *Driver) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if d.isClosed() {
		return driver.Info{}, driver.ErrClosed
	}
	v, err := d.look(ctx, d.LockPath(key))
	if err != nil {
		return driver.Info{}, unavailable(d.closedOr(err))
	}
	in := driver.Info{Token: v.token, Waiters: v.waiters}
	if v.lease {
		in.Permits = v.permits
	}
	hs := make([]*driver.Holder, len(v.holders))
	var firstErr error
	var mu sync.Mutex
	each(len(v.holders), func(i int) {
		p := v.holders[i]
		nd, err := d.get(ctx, p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			// Released since the listing.
		case err != nil:
			mu.Lock()
			firstErr = cmpOr(firstErr, err)
			mu.Unlock()
		default:
			h := holderOf(p[strings.LastIndexByte(p, '/')+1:], nd.data, nd.st, v.shared, !v.shared && !v.lease)
			hs[i] = &h
		}
	})
	if firstErr != nil {
		return driver.Info{}, unavailable(d.closedOr(firstErr))
	}
	for _, h := range hs {
		if h != nil {
			in.Holders = append(in.Holders, *h)
		}
	}
	return in, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// List implements driver.Lister. It lists the root's children (every key
// node), keeps those of keys under prefix, and lists each of these
// (pipelined, batchParallel at a time): one round trip plus one per
// batchParallel matching keys. Keys whose node name is cut and hashed (an
// escaped key longer than 200 bytes) cannot be read back from it and are
// not listed.
func (d *Driver) List(ctx context.Context, prefix string) ([]string, error) {
	if d.isClosed() {
		return nil, driver.ErrClosed
	}
	names, _, err := d.children(ctx, d.root)
	if err != nil {
		return nil, unavailable(d.closedOr(err))
	}
	type cand struct {
		key, node string
		held      bool
		err       error
	}
	var cands []cand
	for _, n := range names {
		key, ok := unescapeName(n)
		if ok && strings.HasPrefix(key, prefix) {
			cands = append(cands, cand{key: key, node: d.root + "/" + n})
		}
	}
	each(len(cands), func(i int) {
		c := &cands[i]
		children, _, err := d.children(ctx, c.node)
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			c.err = err
		case len(queueOf(children)) > 0:
			c.held = true // the queue's first node always holds
		case slices.Contains(children, leasesNode):
			leases, _, err := d.children(ctx, c.node+"/"+leasesNode)
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				c.err = err
			}
			c.held = len(leases) > 0
		}
	})
	var keys []string
	for _, c := range cands {
		if c.err != nil {
			return nil, unavailable(d.closedOr(c.err))
		}
		if c.held {
			keys = append(keys, c.key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// unescapeName returns the key whose node name is name, or false for a name
// that is no key's whole escaped form (a cut and hashed name, the driver's
// own nodes, whose names start with '.', or a foreign node).
func unescapeName(name string) (string, bool) {
	if name == "" || name[0] == '.' || strings.Contains(name, "~") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	key := b.String()
	if escapeName(key) != name {
		return "", false // not ours
	}
	return key, true
}

// Relabel implements driver.Labeler: it writes the label, with the holder's
// token (withToken), into the holder's own node (one setData). A node gone
// is driver.ErrNotHeld, and the lock is lost.
func (d *Driver) Relabel(ctx context.Context, req *driver.Request, label string) error {
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return err
	}
	h := d.held.GetLocked(holdKey{req.Key, req.Owner})
	if h == nil || h.state != stateGranted {
		d.held.Unlock()
		return driver.ErrNotHeld
	}
	path, session, token := h.path(), h.session, h.token
	d.held.Unlock()
	if err := d.awaitSession(ctx); err != nil {
		return d.closedOr(err)
	}
	if d.conn.SessionID() != session {
		return d.lose(ctx, h, errSessionEnded)
	}
	_, err := call(d, ctx, func() (*zk.Stat, error) {
		return d.conn.Set(path, []byte(withToken(label, token)), -1)
	}, nil)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return d.lose(ctx, h, errNodeDeleted)
	case err != nil:
		return unavailable(d.closedOr(err))
	}
	return nil
}

// Watch implements driver.Watcher with ZooKeeper watches: on the key node's
// children (or its existence, while it is missing), a semaphore's leases,
// and the data of an exclusive holder's node (a Relabel). Watches fire once;
// a goroutine sets them again after each event, and after a reconnection
// (go-zookeeper sets a connection's watches again on the next one; an
// expired session fires them all). A watch set just before ctx ends stays
// registered in go-zookeeper until its next event; it costs no goroutine.
func (d *Driver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return nil, err
	}
	d.wg.Add(1)
	d.held.Unlock()
	keyNode := d.LockPath(key)
	events, err := d.armWatch(ctx, keyNode)
	if err != nil {
		d.wg.Done()
		return nil, unavailable(d.closedOr(err))
	}
	out := make(chan struct{}, 1)
	go d.watchLoop(ctx, keyNode, events, out)
	return out, nil
}

// watchLoop sets the watches again after each event and then signals out,
// until ctx ends or the driver is closed. The signal comes after the watches
// are set again, so a reader's look that follows it sees every change a
// watch did not catch, and the watches catch every later one.
func (d *Driver) watchLoop(ctx context.Context, keyNode string, events []<-chan zk.Event, out chan struct{}) {
	defer d.wg.Done()
	defer close(out)
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		if !d.waitEvent(ctx, events) {
			return
		}
		for {
			var err error
			if events, err = d.armWatch(ctx, keyNode); err == nil {
				break
			}
			// Disconnected or failing: wait for a session, and pause
			// between attempts.
			if err := d.awaitSession(ctx); err != nil {
				return
			}
			retry.Reset(pollInterval)
			select {
			case <-retry.C:
			case <-ctx.Done():
				return
			case <-d.held.Done():
				return
			}
		}
		select {
		case out <- struct{}{}:
		default:
		}
	}
}

// waitEvent waits for an event on any of chans; false when ctx ended or the
// driver closed.
func (d *Driver) waitEvent(ctx context.Context, chans []<-chan zk.Event) bool {
	var c [3]<-chan zk.Event
	copy(c[:], chans)
	select {
	case <-c[0]:
	case <-c[1]:
	case <-c[2]:
	case <-ctx.Done():
		return false
	case <-d.held.Done():
		return false
	}
	return true
}

// armWatch sets the watches of a Watch of keyNode, at most three: the key node's
// children (or its creation), a semaphore's leases, and the data of the
// key's exclusive holder.
func (d *Driver) armWatch(ctx context.Context, keyNode string) ([]<-chan zk.Event, error) {
	type answer struct {
		children []string
		ch       <-chan zk.Event
	}
	a, err := call(d, ctx, func() (answer, error) {
		c, _, ch, err := d.conn.ChildrenW(keyNode)
		return answer{c, ch}, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		ch, err := call(d, ctx, func() (<-chan zk.Event, error) {
			ok, _, ch, err := d.conn.ExistsW(keyNode)
			if err == nil && ok {
				err = errVanished // made meanwhile: list it
			}
			return ch, err
		}, nil)
		if errors.Is(err, errVanished) {
			return d.armWatch(ctx, keyNode)
		}
		return []<-chan zk.Event{ch}, err
	}
	if err != nil {
		return nil, err
	}
	chans := []<-chan zk.Event{a.ch}
	if slices.Contains(a.children, leasesNode) {
		ch, err := call(d, ctx, func() (<-chan zk.Event, error) {
			_, _, ch, err := d.conn.ChildrenW(keyNode + "/" + leasesNode)
			return ch, err
		}, nil)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		chans = append(chans, ch)
	}
	if q := queueOf(a.children); len(q) > 0 && !q[0].shared {
		ch, err := call(d, ctx, func() (<-chan zk.Event, error) {
			_, _, ch, err := d.conn.GetW(keyNode + "/" + q[0].name)
			return ch, err
		}, nil)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		chans = append(chans, ch)
	}
	return chans, nil
}

var (
	_ driver.Inspector = (*Driver)(nil)
	_ driver.Lister    = (*Driver)(nil)
	_ driver.Evictor   = (*Driver)(nil)
	_ driver.Labeler   = (*Driver)(nil)
	_ driver.Watcher   = (*Driver)(nil)
)
