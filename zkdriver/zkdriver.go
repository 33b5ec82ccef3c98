// Package zkdriver is the distlock driver for Apache ZooKeeper 3.6 or later,
// on github.com/go-zookeeper/zk.
//
//	import _ "github.com/distlock/lock/zkdriver"
//
//	locker, err := lock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/myapp")
//
// A Driver has one ZooKeeper session, and every lock of the Locker over it is an
// ephemeral sequential node in that session, which the server deletes when the
// session ends. Each Acquire has a node of its own, so goroutines of one process
// exclude each other as separate processes do. The recipe, the proofs and the
// measured figures are in
// https://github.com/distlock/lock/blob/main/docs/backends/zookeeper.md.
//
// # URL format
//
//	zk://zk1:2181,zk2:2181,zk3:2181            an ensemble (port 2181 if none is given)
//	zk://locker:secret@zk1:2181/app            digest authentication and ACLs, under a chroot
//	zk://zk1:2181?session_timeout=30s&connect_timeout=5s&exclusive=write
//
// The driver's parameters:
//
//   - session_timeout (default 10s): the session timeout asked for, bounded by
//     the server; the time a crashed holder blocks others.
//   - connect_timeout (default 10s): how long Open waits for the first session.
//   - exclusive (mutex or write, default mutex): write makes exclusive locks
//     Curator's write lock (WithWriteLockNodes for New).
//
// The portable parameters are package lock's; any other is an error that lists
// these. With a user and password every node the driver makes gets a digest ACL,
// and Open checks that the session may lock under the prefix; the password never
// appears in errors. A program that has a *zk.Conn passes it to New.
//
// # Layout
//
//	<chroot>/<prefix>/<key>/_c_<uuid>-lock-<sequence>       exclusive
//	<chroot>/<prefix>/<key>/_c_<uuid>-__READ__<sequence>    shared
//	<chroot>/<prefix>/<key>/leases/_c_<uuid>-lease-<sequence> a permit
//
// Key nodes are container nodes (escaped key names, LockPath gives the path); the
// lowest sequence holds, and each waiter watches only the node before its own.
//
// # Curator and zk.Lock
//
// The layout is Curator's InterProcessMutex (with protection) and go-zookeeper's
// zk.Lock: on LockPath(key) they take the same lock as the driver. Shared locks
// are Curator's InterProcessReadWriteLock (open with exclusive=write where Java
// services use its write lock) and semaphores its InterProcessSemaphoreV2.
//
// # Capabilities
//
//   - Fencing: yes; the token is a zxid (the key node's pzxid at the grant, or a
//     write's zxid for shared and permit grants), which grows ensemble-wide.
//   - Expiring: no; a lock lives as long as its session.
//   - Notify: yes; a waiter is woken by a watch on the node before its own.
//   - FIFO: yes; sequence numbers are the order of arrival.
//   - Shared and WriterPreference: yes; a reader waits for every exclusive node
//     before its own.
//   - Permits: yes; another n is driver.ErrInvalidArgument where it can be seen.
//   - MinTTL and MaxTTL: 10ms and 366 days (driver.FloorTTL,
//     driver.DefaultMaxTTL).
//
// # Inspection, eviction and leader election
//
// A hold's label is its node's data. Inspect, List, Relabel and Watch read and
// watch the nodes; ForceRelease deletes the holders' nodes and leaves a tombstone
// under <root>/.forced, so the evicted holder reports lock.ErrForceReleased.
//
// # Sessions and lost locks
//
// Lost closes when the session expires or is closed, and before the leader may
// expire a suspended session: the driver counts a lock lost once the negotiated
// session timeout, less the drift allowance, has passed since the leader last
// confirmed the session (a sync every third of the session timeout). A watch on
// a held node reports an operator's deletion at once. Causes:
// lock.ErrSessionExpired, lock.ErrExpired, lock.ErrForceReleased.
//
// # Limits
//
//   - A process paused past the session timeout wakes up holding locks the
//     server gave away: only fencing tokens protect the resource meanwhile.
//   - A ZooKeeper that loses its data starts its zxids again: tokens after the
//     loss can be lower.
//   - go-zookeeper speaks no TLS, and digest credentials cross the network in
//     the clear: use a trusted network.
//   - A Driver from New needs WithSessionTimeout for the bound above.
package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// Driver holds locks in one ZooKeeper session. Use it through lock.New or
// lock.Open; its methods implement driver.Driver, driver.Acquirer and
// driver.BatchRefresher.
type Driver struct {
	conn      *zk.Conn
	ownConn   bool            // made by Open: closed by Close, watched through tapConn and onEvent
	events    <-chan zk.Event // own connection only: closed when go-zookeeper's loop has ended
	root      string          // the node every key's node lives under: chroot + "/" + escaped prefix
	rootPath  []string        // root and its ancestors below "/", to create when missing
	acl       []zk.ACL
	exclusive string        // the kind of an exclusive request's node: lockName, or writeName (WithWriteLockNodes)
	declared  time.Duration // New: the session timeout given by WithSessionTimeout (0: unknown)
	zkLog     *zkLogger     // go-zookeeper's logger on a connection opened from a URL (logging.go)

	epoch     time.Time    // lastTouch counts from here, on the monotonic clock
	lastTouch atomic.Int64 // credit: the leader heard of the session at this time or later (session.go)

	ctx        context.Context // cancelled by Close; bounds background work
	cancel     context.CancelFunc
	wake       chan struct{}                 // nudges the monitor
	state      atomic.Pointer[chan struct{}] // closed (and replaced) at each session event
	wire       wire                          // requests written, as tapConn sees them
	conns      connSet                       // own connection only: the sockets go-zookeeper uses
	handshakes handshakes                    // own connection only: refused ConnectRequests
	wg         sync.WaitGroup
	calls      kit.Calls           // runs go-zookeeper's calls (call.go); closed with the connection
	rounds     kit.Round[struct{}] // the shared read that RefreshBatch calls join (refresh.go)

	// held is the driver's mutex, its locks by key and owner, and its closed
	// gate (Done is closed by Close); it guards the fields below.
	held    *kit.Book[holdKey, *holding]
	byPath  map[string]*holding // granted locks by node path
	orphans []orphan            // nodes of ours nobody wants, to delete once possible
	parents map[uint64]struct{} // key nodes known to exist, by parentHash
	seed    maphash.Seed        // of parentHash
	beating bool                // a heartbeat is in flight

	// The heartbeat chain (session.go): the send and answer times of its last
	// answered link, not yet credited, and when the next may be sent after a
	// failed one.
	link, linkAnswered time.Time
	beatAfter          time.Time
	sawDown            time.Time // New: when the monitor last saw the connection down (zero: not since the last session)

	armWake    bool          // the monitor will look for watches to set
	cleaning   bool          // orphans are being deleted
	cleanAfter time.Time     // no cleaning before this, after a failed one
	session    sessionInfo   // learnt by tapConn (own connection only)
	pre        *tapConn      // Open's first session, until go-zookeeper dials it
	tombLife   time.Duration // kit.TombstoneLife of an unknown TTL; shorter in tests
	shareWait  time.Duration // maxShareWait; longer in tests
}

// sessionInfo is the session as the last connect handshake told it.
type sessionInfo struct {
	id      int64
	timeout time.Duration // negotiated
	passwd  []byte
}

type holdKey struct{ key, owner string }

type holdState uint8

const (
	stateWaiting   holdState = iota // creating the node, or queued behind others
	stateGranted                    // ours
	stateReleasing                  // Release is deleting the node
	stateReleased                   // Release deleted it
	stateDone                       // lost, or forgotten
)

// holding is one Request's node. A held lock costs one of these, its node's
// path (one string, which the maps, go-zookeeper's watch and parent share)
// and the watch; what only an acquisition needs is in acq, dropped at the
// grant.
type holding struct {
	req    *driver.Request
	parent string // the key's node; once node is known, a prefix of it
	node   string // our node's path, parent + "/" + its name; "" until known
	kind   string // the node's kind: lockName, readName, writeName or leaseName
	acq    *acquiring

	// Set when granted.
	token   uint64
	session int64
	start   int64 // the grant's Start, on the driver's clock (Driver.at)

	verdict *verdict // why the node went, once someone else deleted it (evict.go)

	state   holdState
	watched bool // a watch on the node reports its deletion (own connection)
	arming  bool // the monitor is setting that watch
}

// acquiring is what a holding needs until it is granted.
type acquiring struct {
	marker    string // of the node being or last created; "" before the first create
	fence     int64  // a zxid of the grant's own, the token instead of the pzxid (0: none)
	createdIn int64  // the live session before its create was sent (0: unknown)
	owner     int64  // the session that owns the node called name, once known
	pzxid     int64  // the key node's pzxid in the listing that made the lock ours (see viewed)
	viewed    bool   // pzxid is set: a listing showed the node
	unsure    bool   // a create with marker may have been applied unseen
	sent      bool   // a create is in flight; createAbandoned settles it if its caller left
}

// a returns h's acquisition state, made anew if it was dropped. d.held is
// locked.
func (h *holding) a() *acquiring {
	if h.acq == nil {
		h.acq = &acquiring{}
	}
	return h.acq
}

// name is our node's name under parent, "" until known.
func (h *holding) name() string {
	if h.node == "" {
		return ""
	}
	return h.node[len(h.parent)+1:]
}

// setName records our node's name under parent ("": none).
func (h *holding) setName(name string) {
	if name == "" {
		h.node = ""
		return
	}
	h.setNode(h.parent + "/" + name)
}

// setNode records our node's path, which is under parent, and makes parent
// share its memory.
func (h *holding) setNode(path string) {
	h.node = path
	h.parent = path[:len(h.parent)]
}

func (h *holding) path() string { return h.node }

// permits is a semaphore's n (leaseName); 0 otherwise.
func (h *holding) permits() int {
	if h.kind == leaseName {
		return h.req.Permits
	}
	return 0
}

// ownerOrCreator is the session h's node belongs to, as far as known: its
// owner once read, else the session before its create (0: unknown).
func (h *holding) ownerOrCreator() int64 {
	if h.session != 0 {
		return h.session // granted
	}
	if h.a().owner != 0 {
		return h.a().owner
	}
	return h.a().createdIn
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
	if o.writeNodes {
		d.exclusive = writeName
	}
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
		root:      chroot + "/" + escapeName(prefix),
		exclusive: lockName,
		acl:       acl,
		epoch:     time.Now(),
		wake:      make(chan struct{}, 1),
		zkLog:     newZKLogger(),
		held:      kit.NewBook[holdKey, *holding](),
		byPath:    map[string]*holding{},
		parents:   map[uint64]struct{}{},
		seed:      maphash.MakeSeed(),
		tombLife:  kit.TombstoneLife(0),
		shareWait: maxShareWait,
	}
	for i := 1; i < len(d.root); i++ {
		if d.root[i] == '/' {
			d.rootPath = append(d.rootPath, d.root[:i])
		}
	}
	d.rootPath = append(d.rootPath, d.root)
	d.calls.Workers = maxWorkers
	d.ctx, d.cancel = context.WithCancel(context.Background())
	ch := make(chan struct{})
	d.state.Store(&ch)
	return d
}

func (d *Driver) start() {
	d.wg.Add(1)
	go d.monitor()
}

// dial opens a session for a zk:// URL, makes the driver's root and checks
// that the session may lock under it. Every step ends with ctx: go-zookeeper's
// own waits (a name lookup, the connect handshake) take no context, so the
// driver resolves the names itself and, if ctx ends first, closes the
// connection under go-zookeeper.
func dial(ctx context.Context, c urlConfig, prefix string) (*Driver, error) {
	servers, err := resolve(ctx, c.servers)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	if c.user != "" {
		acl = zk.DigestACL(zk.PermAll, c.user, c.password)
	}
	d := newDriver(c.chroot, prefix, acl)
	if c.writeNodes {
		d.exclusive = writeName
	}
	d.ownConn = true
	distinct := map[string]struct{}{}
	for _, s := range servers {
		distinct[s] = struct{}{}
	}
	d.handshakes.servers = len(distinct)
	first, err := d.firstSession(ctx, servers, c.sessionTimeout, c.connectTimeout)
	if err != nil {
		d.cancel()
		return nil, fmt.Errorf("zkdriver: %s: %w", strings.Join(c.servers, ","), err)
	}
	d.pre = first
	conn, events, err := zk.Connect(servers, c.sessionTimeout,
		zk.WithLogger(d.zkLog), zk.WithLogInfo(true), zk.WithHostProvider(&hostList{first: first.addr}),
		zk.WithDialer(d.dialTap), zk.WithEventCallback(d.onEvent))
	if err != nil {
		d.cancel()
		first.Conn.Close()
		return nil, fmt.Errorf("zkdriver: %w", err)
	}
	d.conn, d.events = conn, events
	fail := func(err error) (*Driver, error) {
		d.held.Lock()
		d.held.CloseLocked()
		d.held.Unlock()
		d.cancel()
		// A session that answered is closed properly; after ctx ended, the
		// server is not waited for.
		d.endConn(ctx.Err() == nil)
		d.endCalls()
		return nil, err
	}
	if err := waitSession(ctx, conn, events, c.connectTimeout); err != nil {
		return fail(fmt.Errorf("zkdriver: %s: %w", strings.Join(c.servers, ","), err))
	}
	if c.user != "" {
		// Digest authentication never fails here: the server takes any
		// password as another identity, which shows only when a node's ACL is
		// checked (checkAccess). go-zookeeper sends it again after every
		// reconnection.
		_, err := call(d, ctx, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(c.user+":"+c.password))
		}, nil)
		if err != nil {
			return fail(fmt.Errorf("zkdriver: digest authentication: %w", unavailable(err)))
		}
	}
	if err := d.ensureRoot(ctx); err != nil {
		return fail(d.accessError(unavailable(err), c.user))
	}
	if err := d.checkAccess(ctx); err != nil {
		return fail(d.accessError(unavailable(err), c.user))
	}
	d.start()
	return d, nil
}

// resolve looks the servers' host names up within ctx, so that go-zookeeper,
// which would look them up itself with a timeout of its own, gets addresses.
func resolve(ctx context.Context, servers []string) ([]string, error) {
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("%w: zkdriver: server %q is not host:port", driver.ErrInvalidURL, s)
		}
		if net.ParseIP(host) != nil {
			out = append(out, s)
			continue
		}
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				return nil, fmt.Errorf("zkdriver: server %q: %w", s, err)
			}
			return nil, fmt.Errorf("zkdriver: server %q: %w", s, unavailable(err))
		}
		for _, a := range addrs {
			out = append(out, net.JoinHostPort(a, port))
		}
	}
	return out, nil
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
			return fmt.Errorf("%w: no ZooKeeper session within %v (connect_timeout)", driver.ErrUnavailable, timeout)
		}
	}
	return nil
}

// LockPath returns the path of key's lock node, the parent of the lock
// queue's nodes. A go-zookeeper zk.Lock or a Curator InterProcessMutex made on
// this path (on a client without chroot) takes the same lock.
func (d *Driver) LockPath(key string) string { return d.root + "/" + escapeName(key) }

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: true, Expiring: false, Notify: true, FIFO: true,
		Shared: true, WriterPreference: true, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: driver.DefaultMaxTTL}
}

// closeGrace is how long Close waits for the server to confirm the end of the
// session before it closes the connection without that: a server that answers
// does so within milliseconds, and one that does not (frozen, partitioned, or
// gone) must not hold Close up. The server then expires the session after its
// timeout, and deletes its nodes then. For a Driver from New it bounds the
// deletion of the nodes the driver made.
const closeGrace = 500 * time.Millisecond

// Close ends the driver. A Driver from Open closes its session, which makes the
// server delete every lock node of it at once; a Driver from New deletes its
// nodes and leaves the connection open. Locks still held are reported lost.
// Waiting Acquire calls return driver.ErrClosed, and so does every later call;
// closing twice returns nil.
//
// Close waits for the server for at most about half a second: on a server that
// does not answer, a Driver from Open closes its connection without the
// server's word, and the session and its nodes then last until the server
// expires it; a Driver from New leaves what it could not delete to the end of
// its session. Close returns within about a second in every case (go-zookeeper
// gives up its close request after a second when a reconnection is under way,
// two when sixteen requests already wait for a reconnection), and no goroutine
// of the driver or of go-zookeeper outlives it.
func (d *Driver) Close() error {
	d.held.Lock()
	held, first := d.held.CloseLocked()
	if !first {
		d.held.Unlock()
		return nil
	}
	d.cancel()
	var lost []*driver.Request
	var nodes []orphan
	for _, h := range held {
		if h.state == stateGranted || h.state == stateReleasing {
			lost = append(lost, h.req)
		}
		switch {
		case h.name() != "":
			nodes = append(nodes, orphan{path: h.path(), session: h.ownerOrCreator()})
		case h.a().unsure:
			nodes = append(nodes, orphan{parent: h.parent, marker: h.a().marker, session: h.a().createdIn})
		}
		h.state = stateDone
	}
	nodes = append(nodes, d.orphans...)
	d.byPath, d.orphans = map[string]*holding{}, nil
	d.held.Unlock()

	// Before the nodes go, so that Lost closes before anyone else can hold.
	for _, r := range lost {
		r.Lost.Lost(errClosed)
	}
	if d.ownConn {
		d.endConn(true)
		d.wg.Wait()
		d.endCalls()
		return nil
	}
	err := d.removeOnClose(nodes)
	// The program's connection stays open: calls still under way end when
	// it answers, and the idle workers now.
	d.calls.Close()
	d.wg.Wait()
	return err
}

// endConn ends the connection the driver made, and every goroutine of
// go-zookeeper's. It asks the server to close the session (go-zookeeper's
// Close) and, with waitAnswer, waits up to closeGrace for the answer; without,
// only until the request is on the wire. Then it closes the sockets under
// go-zookeeper, which ends its reads and writes at once, and fails a close
// request already sent, so that go-zookeeper's Close returns too.
func (d *Driver) endConn(waitAnswer bool) {
	sent := d.wire.expect(opCloseSession, "")
	defer d.wire.forget(opCloseSession, "", sent)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		d.conn.Close()
	}()
	var until <-chan struct{} // nil: wait for the answer
	switch {
	case !waitAnswer && d.conn.State() != zk.StateHasSession:
		until = alreadyClosed // no session to close: at once
	case !waitAnswer:
		until = sent
	}
	t := time.NewTimer(closeGrace)
	select {
	case <-closed:
	case <-until:
	case <-t.C:
	}
	t.Stop()
	d.conns.abort()
	d.held.Lock()
	pre := d.pre
	d.pre = nil
	d.held.Unlock()
	if pre != nil { // go-zookeeper never took it
		_ = pre.Conn.Close()
	}
	<-closed
	for range d.events { // closed when go-zookeeper's main loop has ended
	}
	d.conns.wait(closeGrace)
}

// alreadyClosed is a closed channel.
var alreadyClosed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// endCalls refuses further calls and waits for those under way, and for the
// goroutines that ran them: on a closed connection they all end at once.
func (d *Driver) endCalls() {
	d.calls.Close()
	d.calls.Wait()
}

// removeOnClose deletes the nodes of a Driver from New from the connection,
// which stays open, pipelined, within closeGrace. A node of a session that
// ended went with it; one that cannot be deleted now (disconnected, or no
// answer in time) stays until the session ends.
func (d *Driver) removeOnClose(nodes []orphan) error {
	if len(nodes) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	if d.conn.State() != zk.StateHasSession {
		// No events come from a connection of the program's own: look.
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for d.conn.State() != zk.StateHasSession {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("zkdriver: deleting lock nodes on close (they stay until the session ends): %w: not connected", driver.ErrUnavailable)
			}
		}
	}
	live := d.conn.SessionID()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, batchParallel)
	)
	for _, o := range nodes {
		if o.session != 0 && o.session != live {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.removeOrphan(ctx, o); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("zkdriver: deleting lock nodes on close (they stay until the session ends): %w", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// Errors the driver reports for a lock that is gone.
var (
	errSessionEnded = fmt.Errorf("%w: %w: the ZooKeeper session ended (expired or closed), and its lock nodes with it", driver.ErrNotHeld, driver.ErrSessionExpired)
	errSuspended    = fmt.Errorf("%w: %w: no contact with ZooKeeper for the session timeout: the session may have expired", driver.ErrNotHeld, driver.ErrExpired)
	errNodeDeleted  = fmt.Errorf("%w: %w: the lock node was deleted", driver.ErrNotHeld, driver.ErrExpired)
	errClosed       = fmt.Errorf("%w: the ZooKeeper driver was closed (%w)", driver.ErrNotHeld, driver.ErrClosed)
)

// at is t on the driver's clock: the time since its epoch, by the monotonic
// clock where t carries it (time.Now's do).
func (d *Driver) at(t time.Time) int64 { return int64(t.Sub(d.epoch)) }

// timeAt is the time of an instant on the driver's clock.
func (d *Driver) timeAt(i int64) time.Time { return d.epoch.Add(time.Duration(i)) }
