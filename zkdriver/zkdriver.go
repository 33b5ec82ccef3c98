// Package zkdriver is the distlock driver for Apache ZooKeeper (3.6 or later),
// using github.com/go-zookeeper/zk.
//
//	import _ "github.com/distlock/lock/zkdriver"
//
//	locker, err := lock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/myapp")
//
// Doc to be completed.
package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// Driver holds locks in one ZooKeeper session. Use it through lock.New or
// lock.Open; its methods implement driver.Driver, driver.Acquirer and
// driver.BatchRefresher.
type Driver struct {
	conn     *zk.Conn
	ownConn  bool            // made by Open: closed by Close, watched through tapConn and onEvent
	events   <-chan zk.Event // own connection only: closed when go-zookeeper's loop has ended
	root     string          // the node every key's node lives under: chroot + "/" + escaped prefix
	rootPath []string        // root and its ancestors below "/", to create when missing
	acl      []zk.ACL
	declared time.Duration // New: the session timeout given by WithSessionTimeout (0: unknown)

	epoch     time.Time    // lastTouch counts from here, on the monotonic clock
	lastTouch atomic.Int64 // send time of the latest request the server answered

	ctx     context.Context // cancelled by Close; bounds background work
	cancel  context.CancelFunc
	done    chan struct{}                 // closed by Close
	wake    chan struct{}                 // nudges the monitor
	state   atomic.Pointer[chan struct{}] // closed (and replaced) at each session event
	wire    wire                          // requests written, as tapConn sees them
	wg      sync.WaitGroup
	ops     sync.WaitGroup // jobs of call, running or queued
	jobs    chan func()    // to idle workers
	workers atomic.Int32

	mu         sync.Mutex
	closed     bool
	holds      map[holdKey]*holding
	byPath     map[string]*holding // granted locks by node path
	orphans    []orphan            // nodes of ours nobody wants, to delete once possible
	parents    map[string]struct{} // key nodes known to exist
	beating    bool                // a heartbeat is in flight
	armWake    bool                // the monitor will look for watches to set
	cleaning   bool                // orphans are being deleted
	cleanAfter time.Time           // no cleaning before this, after a failed one
	session    sessionInfo         // learnt by tapConn (own connection only)
}

// sessionInfo is the session as the last connect handshake told it.
type sessionInfo struct {
	id      int64
	timeout time.Duration // negotiated
	passwd  []byte
}

type holdKey struct{ key, owner string }

type holdState int

const (
	stateWaiting   holdState = iota // creating the node, or queued behind others
	stateGranted                    // ours
	stateReleasing                  // Release is deleting the node
	stateReleased                   // Release deleted it
	stateDone                       // lost, or forgotten
)

// holding is one Request's node.
type holding struct {
	req    *driver.Request
	parent string // the key's node
	marker string // of the node being or last created; "" before the first create
	unsure bool   // a create with marker may have been applied unseen
	sent   bool   // a create is in flight; createAbandoned settles it if its caller left
	name   string // our node's name under parent, "" until known
	state  holdState

	createdIn int64    // the live session before its create was sent (0: unknown)
	owner     int64    // the session that owns the node called name, once known
	view      *zk.Stat // the key node's stat in the listing that made the lock ours

	// Set when granted.
	token   uint64
	session int64
	start   time.Time
	watched bool // a watch on the node reports its deletion (own connection)
	arming  bool // the monitor is setting that watch
}

func (h *holding) path() string { return h.parent + "/" + h.name }

// ownerOrCreator is the session h's node belongs to, as far as known: its
// owner once read, else the session before its create (0: unknown).
func (h *holding) ownerOrCreator() int64 {
	if h.owner != 0 {
		return h.owner
	}
	return h.createdIn
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
)

// New returns a Driver that locks through conn, a connection the program
// already has. The session of conn holds the locks, so each process (or each
// independent part of one) should have its own. Close leaves conn open and
// deletes the nodes the driver made.
//
// go-zookeeper does not tell its users the session timeout it negotiated, nor
// hand them its events once connected: give the timeout with WithSessionTimeout
// so that a disconnected session counts as lost in time. The driver notices an
// expired session by polling conn's state and a deleted lock node at the next
// refresh; a Driver from Open learns both at once.
func New(conn *zk.Conn, opts ...Option) (*Driver, error) {
	if conn == nil {
		return nil, errors.New("zkdriver: nil *zk.Conn")
	}
	o := options{prefix: DefaultPrefix, acl: zk.WorldACL(zk.PermAll)}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.err != nil {
		return nil, o.err
	}
	d := newDriver(o.chroot, o.prefix, o.acl)
	d.conn = conn
	d.declared = o.sessionTimeout
	d.start()
	return d, nil
}

func newDriver(chroot, prefix string, acl []zk.ACL) *Driver {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	d := &Driver{
		root:    chroot + "/" + escapeName(prefix),
		acl:     acl,
		epoch:   time.Now(),
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		jobs:    make(chan func()),
		holds:   map[holdKey]*holding{},
		byPath:  map[string]*holding{},
		parents: map[string]struct{}{},
	}
	for i := 1; i < len(d.root); i++ {
		if d.root[i] == '/' {
			d.rootPath = append(d.rootPath, d.root[:i])
		}
	}
	d.rootPath = append(d.rootPath, d.root)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	ch := make(chan struct{})
	d.state.Store(&ch)
	return d
}

func (d *Driver) start() {
	d.wg.Add(1)
	go d.monitor()
}

// discard silences go-zookeeper, which otherwise logs every reconnection to the
// standard logger. Nothing it logs is needed: failures reach the caller as
// errors.
type discard struct{}

func (discard) Printf(string, ...any) {}

// dial opens a session for a zk:// URL and makes the driver's root.
func dial(ctx context.Context, c urlConfig, prefix string) (*Driver, error) {
	acl := zk.WorldACL(zk.PermAll)
	if c.user != "" {
		acl = zk.DigestACL(zk.PermAll, c.user, c.password)
	}
	d := newDriver(c.chroot, prefix, acl)
	d.ownConn = true
	conn, events, err := zk.Connect(c.servers, c.sessionTimeout,
		zk.WithLogger(discard{}), zk.WithLogInfo(false),
		zk.WithDialer(d.dialTap), zk.WithEventCallback(d.onEvent))
	if err != nil {
		return nil, fmt.Errorf("zkdriver: %w", err)
	}
	d.conn, d.events = conn, events
	fail := func(err error) (*Driver, error) {
		d.cancel()
		conn.Close()
		for range events {
		}
		d.ops.Wait()
		return nil, err
	}
	if err := waitSession(ctx, conn, events, c.connectTimeout); err != nil {
		return fail(fmt.Errorf("zkdriver: %s: %w", strings.Join(c.servers, ","), err))
	}
	if c.user != "" {
		// Digest authentication never fails here: a wrong password shows as
		// zk.ErrNoAuth on nodes made with the right one. go-zookeeper sends it
		// again after every reconnection.
		_, err := call(d, ctx, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(c.user+":"+c.password))
		}, nil)
		if err != nil {
			return fail(fmt.Errorf("zkdriver: digest authentication: %w", err))
		}
	}
	if err := d.ensureRoot(ctx); err != nil {
		return fail(err)
	}
	d.start()
	return d, nil
}

// waitSession waits until conn has a session.
func waitSession(ctx context.Context, conn *zk.Conn, events <-chan zk.Event, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for conn.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("no ZooKeeper session within %v (connect_timeout)", timeout)
		}
	}
	return nil
}

// Root returns the path of the node under which every key's lock lives:
// the chroot, then the escaped prefix.
func (d *Driver) Root() string { return d.root }

// LockPath returns the path of key's lock node, the parent of the lock
// queue's nodes. A go-zookeeper zk.Lock or a Curator InterProcessMutex made on
// this path (on a client without chroot) takes the same lock.
func (d *Driver) LockPath(key string) string { return d.root + "/" + escapeName(key) }

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: true, Expiring: false, Notify: true, FIFO: true}
}

// closeTimeout bounds how long Close of a Driver from New spends deleting its
// nodes.
const closeTimeout = 10 * time.Second

// Close ends the driver. A Driver from Open closes its session, which makes the
// server delete every lock node of it at once; a Driver from New deletes its
// nodes and leaves the connection open. Locks still held are reported lost.
// Waiting Acquire calls return driver.ErrClosed, and so does every later call;
// closing twice returns nil.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.cancel()
	var lost []*driver.Request
	var nodes []orphan
	for _, h := range d.holds {
		if h.state == stateGranted || h.state == stateReleasing {
			lost = append(lost, h.req)
		}
		switch {
		case h.name != "":
			nodes = append(nodes, orphan{path: h.path(), session: h.ownerOrCreator()})
		case h.unsure:
			nodes = append(nodes, orphan{parent: h.parent, marker: h.marker, session: h.createdIn})
		}
		h.state = stateDone
	}
	nodes = append(nodes, d.orphans...)
	d.holds, d.byPath, d.orphans = map[holdKey]*holding{}, map[string]*holding{}, nil
	d.mu.Unlock()

	// Before the nodes go, so that Lost closes before anyone else can hold.
	for _, r := range lost {
		r.Lost(errClosed)
	}
	var err error
	if d.ownConn {
		d.conn.Close()
		for range d.events {
		}
		d.wg.Wait()
		d.ops.Wait()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for _, o := range nodes {
		if e := d.removeOnClose(ctx, o); e != nil && err == nil {
			err = fmt.Errorf("zkdriver: deleting lock nodes on close (they stay until the session ends): %w", e)
		}
	}
	d.wg.Wait()
	return err
}

// removeOnClose deletes a node of ours from a connection that stays open,
// waiting for it to reconnect if need be. A node of a session that ended went
// with it.
func (d *Driver) removeOnClose(ctx context.Context, o orphan) error {
	var pause backoff
	for {
		if d.conn.State() == zk.StateHasSession {
			if o.session != 0 && o.session != d.conn.SessionID() {
				return nil
			}
			err := d.removeOrphan(ctx, o)
			if err == nil || !transient(err) {
				return err
			}
		}
		if err := pause.wait(ctx, nil); err != nil {
			return err
		}
	}
}

// Errors the driver reports for a lock that is gone.
var (
	errSessionEnded = fmt.Errorf("%w: the ZooKeeper session ended (expired or closed), and its lock nodes with it", driver.ErrNotHeld)
	errSuspended    = fmt.Errorf("%w: no contact with ZooKeeper for the session timeout: the session may have expired", driver.ErrNotHeld)
	errNodeDeleted  = fmt.Errorf("%w: the lock node was deleted", driver.ErrNotHeld)
	errClosed       = fmt.Errorf("%w: the ZooKeeper driver was closed (%w)", driver.ErrNotHeld, driver.ErrClosed)
	errDisconnected = errors.New("zkdriver: not connected to ZooKeeper (the session may still be alive)")
)
