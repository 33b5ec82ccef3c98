// Package redisdriver is the distlock driver for Redis and Valkey: a standalone
// server, a Sentinel-managed primary, or a Redis Cluster.
//
//	import _ "github.com/distlock/lock/redisdriver"
//
//	locker, err := lock.Open(ctx, "redis://:password@redis.internal:6379/0")
//
// A lock is the Redis string `SET key owner NX PX ttl`, taken by a Lua script
// that also mints the fencing token in the same round trip; release and
// refresh are scripts that compare the owner first, so a holder whose lock
// expired can neither delete nor extend its successor's. Any client of the
// standard pattern (SET NX PX, compare-and-delete) excludes and is excluded by
// this driver's locks on the same key. The recipe, the key layout, the proofs
// and the measured costs are in docs/backends/redis.md.
//
// # URL format
//
//	redis://[[user]:password@]host[:port][/db][?param=value&...]
//	rediss://[[user]:password@]host[:port][/db][?...]              TLS
//	redis+unix://[[user]:password@]/path/to/redis.sock[?db=N&...]   unix socket
//	redis+sentinel://[[user]:password@]host:port[/db]?master_name=NAME[&addr=host:port...][&username=U&password=P]
//	rediss+sentinel://...                                          Sentinel, TLS
//	redis+cluster://[[user]:password@]host:port[?addr=host:port...]
//	rediss+cluster://...                                           Cluster, TLS
//
// Each form is parsed by go-redis's own parser, so its query parameters are
// go-redis's (timeouts, pool sizes, client_name, protocol, skip_verify for
// rediss); an unknown one is an error that lists the accepted ones. The
// driver's own parameter is fencing (true by default; see Without fencing).
// Open connects once: a wrong password, a missing ACL permission or a TLS
// failure fails it as a permanent error, an unreachable server as
// driver.ErrUnavailable. Sentinel options that send writes to replicas are
// refused. Programs that have a client use New (a *redis.Client, a
// *redis.ClusterClient or a failover client; not a *redis.Ring).
//
// # Fencing
//
// Each grant mints a token: the previous one plus one, but never less than
// the server's clock in microseconds, so tokens keep increasing even when the
// fence record is gone (a restart without persistence, a failover). Fenced
// checks a token where the guarded resource is itself a Redis value.
//
// # Without fencing
//
// fencing=false (WithFencing(false)) takes bsm/redislock's layout: an
// uncontended TryAcquire is a single SET NX PX. Capabilities.Fencing is then
// false and tokens are 0; mutual exclusion, waiting and queue order are
// unchanged, and drivers with and without fencing may share keys.
//
// # Waiting
//
// A waiting Acquire joins the key's queue; a release hands the lock to the
// first live waiter and tells it on its driver's pub/sub inbox, so it holds
// the lock without another round trip. A holder that vanished delays the
// waiters by its TTL; a dead waiter delays the others by up to twice its TTL.
//
// # Read-write locks and semaphores
//
// Shared holds (with writer preference) and permits of a semaphore wait in
// the key's one queue, in arrival order. A key is one shape while anyone holds
// it: another shape or another n is driver.ErrInvalidArgument.
//
// # Sets of keys
//
// AcquireAll and TryAcquireAll take free keys in one round trip
// (driver.SetAcquirer): one script checks every key as Acquire's first try
// does and takes all of them or none. A key held or waited for, or keys in
// several Cluster hash slots (each key is a slot of its own, so almost any
// set on a Cluster), make package lock take them one at a time.
//
// # Inspection, eviction and leader election
//
// The driver implements driver.Inspector, Lister, Evictor, Labeler and
// Watcher, so package lock's Inspect, List, ForceRelease, Campaign, Leader and
// Observe work on it.
//
// # Capabilities
//
//   - Fencing: yes, minted in the acquire script; no with fencing=false.
//   - Expiring: yes; a lock is a key with a TTL, extended by refresh.
//   - Notify: yes; a release tells the first waiter on its inbox.
//   - FIFO: yes, in the order the server queued the waiters (a server
//     restart loses the queue; TryAcquire does not queue).
//   - Shared: yes, with writer preference. Permits: yes.
//   - MinTTL: 10ms (driver.FloorTTL), so that the drift leaves validity;
//     MaxTTL: 366 days (driver.DefaultMaxTTL). The driver itself carries every
//     time.Duration without overflow.
//
// # Lost locks
//
// A refresh reports a lock lost when its key is gone or holds another owner,
// or when the server that granted it was restarted or replaced (its run_id
// changed). A driver that holds locks keeps its inbox subscribed; when that
// connection comes back after a break, every held lock is checked at once
// rather than at its next refresh. The cause (lock.Err): lock.ErrServerChanged,
// lock.ErrTakenOver, lock.ErrExpired or lock.ErrForceReleased.
//
// # Errors
//
// Failures that may pass (connection errors, timeouts, LOADING, TRYAGAIN,
// CLUSTERDOWN, MASTERDOWN, READONLY, BUSY, NOREPLICAS) are marked
// driver.ErrUnavailable, and package lock retries them within the caller's
// context; every other answer (NOAUTH, WRONGPASS, NOPERM, WRONGTYPE,
// ErrWrongType, ErrForeignData) fails the call at once.
//
// # Logging
//
// The driver prints nothing. Its init routes go-redis's process-wide logger,
// so go-redis's lines reach the logger a Locker gives (lock.WithLogger) with
// client=go-redis, and are dropped without one.
//
// # Limits
//
// A Redis without persistence that restarts, and a failover to a replica that
// had not received a grant, can give a lock to a second holder before the
// first learns of the loss; fencing tokens still increase, so a resource that
// checks them rejects the stale holder. Keys must not be evicted (a
// noeviction maxmemory policy). Redis 6.2 or later, or any Valkey; the ACL
// permissions a user needs, Close's bounds and the rest are in
// docs/backends/redis.md.
package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
)

// DefaultPrefix is the namespace of every key when no prefix is given.
const DefaultPrefix = redislayout.DefaultPrefix

// fenceKeep is how long a fence record outlives its grant's TTL. Tokens do not
// depend on it (see Fencing in the package documentation); it bounds the memory
// of keys no longer used.
const fenceKeep = 24 * time.Hour

// minLease is the shortest time a waiter keeps its place in a queue without
// renewing it.
const minLease = time.Second

// abandonTimeout bounds the cleanup of a waiter that gives up (and so how
// long a cancelled Acquire, or Close, waits for a server that stopped
// answering), and the release of a lock found on a changed server.
const abandonTimeout = time.Second

var (
	// ErrWrongType is returned (wrapped) by TryAcquire and Acquire when the lock's
	// key holds a value that is not a string, so it is not a lock of this driver
	// or of the standard SET NX pattern. The value is left untouched.
	ErrWrongType = errors.New("redisdriver: the lock's key holds a value that is not a string (not a lock); it was left untouched")

	// ErrForeignData is returned (wrapped) by TryAcquire and Acquire when one of
	// the driver's own keys of a lock (fence, queue, waiters) holds data of
	// another type. It is left untouched.
	ErrForeignData = errors.New("redisdriver: a key in the driver's namespace holds foreign data")

	// ErrServerChanged is returned by Refresh (wrapped together with
	// driver.ErrNotHeld and lock.ErrServerChanged) and passed to
	// Request.Lost when the server holding a lock was restarted or replaced
	// since the lock was granted (its run_id changed).
	ErrServerChanged = errors.New("redisdriver: the Redis server holding the lock was restarted or replaced (run_id changed)")
)

// Option configures a Driver made with New.
type Option func(*options)

type options struct {
	prefix  string // escaped
	owned   bool   // Close closes the client
	fencing bool
}

// WithPrefix sets the namespace of every key the driver writes (DefaultPrefix
// when empty).
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix != "" {
			o.prefix = redislayout.Escape(prefix)
		}
	}
}

// WithFencing(false) gives up fencing tokens for a lighter acquire: see
// Without fencing in the package documentation (the URL parameter
// fencing=false). Fencing is on by default.
func WithFencing(on bool) Option { return func(o *options) { o.fencing = on } }

// withOwnedClient makes Close close the client (for drivers made from a URL).
func withOwnedClient() Option { return func(o *options) { o.owned = true } }

// Driver locks keys on a Redis or Valkey server, a Sentinel-managed primary or
// a Cluster. Use it through lock.New or lock.Open; its methods implement
// driver.Driver, driver.Acquirer, driver.BatchRefresher and
// driver.SetAcquirer, and (see
// Inspection, eviction and leader election) driver.Inspector,
// driver.Lister, driver.Evictor, driver.Labeler and driver.Watcher.
type Driver struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // client, when it is one
	owned   bool                 // Close closes client
	fencing bool                 // see WithFencing
	prefix  string               // escaped
	inbox   string               // this driver's pub/sub channel

	// attemptTimeout bounds one TryAcquire, Refresh or Release: the
	// client's read timeout (scripts.go).
	attemptTimeout time.Duration

	epoch  time.Time          // the origin of since
	ctx    context.Context    // cancelled by Close: ends waiting and background work
	cancel context.CancelFunc //
	calls  sync.WaitGroup     // Acquire calls in flight
	wg     sync.WaitGroup     // the inbox reader and its checks

	dialWatch      *redisproto.DialWatch // counts dials (see grantedBy); ends them at Close; logs failed ones
	logs           redisproto.LogSink    // the Locker's logger (UseLogger)
	countedClients sync.Map              // *redis.Client whose dials are counted -> true

	// held is the driver's mutex, its granted locks (where, and their fence
	// record's due time) and its closed gate; it guards the fields below.
	held    *kit.Book[*driver.Request, heldLock]
	nodes   []node             // the nodes of held locks, by index (see heldLock)
	nodeIDs map[node]uint32    // index of each node in nodes
	waiters map[string]*waiter // waiting Acquire calls by owner
	runIDs  map[string]seenID  // last run_id seen, by node address ("" outside a cluster)
	sub     subscription
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
	_ driver.LoggerUser     = (*Driver)(nil)
)

// New returns a Driver that locks with client, which the caller keeps and
// closes after the Driver. client may be a *redis.Client (standalone or from
// redis.NewFailoverClient) or a *redis.ClusterClient; a *redis.Ring is refused.
// For timely loss detection the client should honour context deadlines
// (redis.Options.ContextTimeoutEnabled).
func New(client redis.UniversalClient, opts ...Option) (*Driver, error) {
	if client == nil {
		return nil, errors.New("redisdriver: nil client")
	}
	if _, ok := client.(*redis.Ring); ok {
		return nil, fmt.Errorf("%w: redisdriver: a *redis.Ring spreads keys and pub/sub channels over independent servers; use a *redis.Client or *redis.ClusterClient", driver.ErrUnsupported)
	}
	d := &Driver{
		client:  client,
		held:    kit.NewBook[*driver.Request, heldLock](),
		nodeIDs: map[node]uint32{},
		waiters: map[string]*waiter{},
		runIDs:  map[string]seenID{},
	}
	d.cluster, _ = client.(*redis.ClusterClient)
	d.attemptTimeout = attemptTimeout(client)
	o := options{prefix: DefaultPrefix, fencing: true}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	d.prefix, d.owned, d.fencing = o.prefix, o.owned, o.fencing
	d.dialWatch = redisproto.NewDialWatch(d.owned, &d.logs)
	d.countDials(client)
	d.inbox = redislayout.NewInbox(d.prefix)
	d.sub.resub = make(chan struct{})
	d.ctx, d.cancel = context.WithCancel(redisproto.WithLogSink(context.Background(), &d.logs))
	d.epoch = time.Now()
	return d, nil
}

// UseLogger implements driver.LoggerUser: see Logging in the package
// documentation.
func (d *Driver) UseLogger(l *slog.Logger) { d.logs.Set(l) }

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fencing: d.fencing, Expiring: true, Notify: true, FIFO: true,
		Shared: true, WriterPreference: true, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: min(redislayout.MaxTTL, driver.DefaultMaxTTL),
	}
}

// usable returns ErrClosed after Close, or ctx's error.
func (d *Driver) usable(ctx context.Context) error {
	d.held.Lock()
	closed := d.held.ClosedLocked()
	d.held.Unlock()
	if closed {
		return driver.ErrClosed
	}
	return ctx.Err()
}

// Close stops the driver's pub/sub reader and, for a driver opened from a URL,
// closes its client. Waiting Acquire calls give up their place and return
// driver.ErrClosed. Locks still held stay until their TTL ends. A driver
// opened from a URL closes within about abandonTimeout (a second) even when
// the server stopped answering; with a client given to New, which Close does
// not close, a round trip in flight ends at its deadline (the client's read
// timeout, or the driver's own bounds of a second for its background work).
func (d *Driver) Close() error {
	d.held.Lock()
	_, first := d.held.CloseLocked() // the locks stay on the server until their TTL
	d.held.Unlock()
	if !first {
		return nil
	}
	d.cancel() // interrupts waiting Acquire calls and background checks
	var err error
	if d.owned {
		// Waiters leave their queues while the client is open; those that
		// cannot within abandonTimeout (the server stopped answering) are cut
		// off: closing the client closes its connections, which ends every
		// round trip in flight at once, the background work's too.
		waited := make(chan struct{})
		go func() {
			d.calls.Wait()
			close(waited)
		}()
		t := time.NewTimer(abandonTimeout)
		select {
		case <-waited:
		case <-t.C:
		}
		t.Stop()
		err = d.client.Close()
	}
	d.calls.Wait()
	d.held.Lock()
	ps := d.sub.ps
	d.held.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	d.wg.Wait()
	d.dialWatch.Close() // go-redis's own dial goroutines, for an owned client
	return err
}

// heldLock is what the driver keeps for each lock it holds, kept small
// because a process may hold many: the node that granted it, as an index in
// Driver.nodes (the nodes a process meets are few: one per server, and one
// more per restart or failover seen), and when its refresh must next extend
// the fence record (see fenceDue in refresh.go).
type heldLock struct {
	fenceUntil int32 // the fence record's expiry at the earliest, in whole seconds by since; 0: unknown; noRecord: none to keep
	node       uint32
}

// noRecord is heldLock.fenceUntil for a lock whose value carries its label
// (taken without fencing, see tryPlain): the fence key holds no record of
// it, so its refresh never extends the fence key.
const noRecord = -1

// fenceExpiry is h's fenceUntil as a time by since.
func (h heldLock) fenceExpiry() time.Duration { return time.Duration(h.fenceUntil) * time.Second }

// since is the driver's monotonic clock, for heldLock.fenceUntil.
func (d *Driver) since() time.Duration { return time.Since(d.epoch) }

// nodeIDLocked returns n's index in d.nodes, adding it; d.held is locked.
func (d *Driver) nodeIDLocked(n node) uint32 {
	id, ok := d.nodeIDs[n]
	if !ok {
		id = uint32(len(d.nodes))
		d.nodes = append(d.nodes, n)
		d.nodeIDs[n] = id
	}
	return id
}

// heldNode returns the node that granted req, if req is held.
func (d *Driver) heldNode(req *driver.Request) (node, bool) {
	d.held.Lock()
	defer d.held.Unlock()
	h, ok := d.held.LookupLocked(req)
	if !ok {
		return node{}, false
	}
	return d.nodes[h.node], true
}

// record remembers a granted lock and the server that holds it. Its fence
// record is extended at its first refresh (its expiry is not known: a grant
// keeps the expiry of a record it finds), unless the lock's value carries
// its label (plain) and the fence key no record of it.
// The first lock held starts the inbox (see watch).
func (d *Driver) record(req *driver.Request, n node, plain bool) {
	h := heldLock{}
	if plain {
		h.fenceUntil = noRecord
	}
	d.held.Lock()
	h.node = d.nodeIDLocked(n)
	_ = d.held.PutLocked(req, h) // refused only after Close, when nothing is kept
	start := !d.sub.watched && !d.held.ClosedLocked()
	if start {
		d.sub.watched = true
		d.wg.Add(1)
	}
	d.held.Unlock()
	if start {
		go d.watch()
	}
}

func (d *Driver) forget(req *driver.Request) {
	d.held.Lock()
	d.held.TakeLocked(req)
	d.held.Unlock()
}

var millis = redisproto.Millis

// classify marks a transient failure with driver.ErrUnavailable (see Errors
// in the package documentation).
var classify = redisproto.Classify
