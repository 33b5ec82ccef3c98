// Package pgadvisory is the distlock driver for PostgreSQL session advisory
// locks. Programs that already run PostgreSQL need no other server, and the
// driver does not take their connection pool: locks live on a few dedicated
// connections of their own.
//
//	import _ "github.com/distlock/lock/pgadvisory"
//
//	locker, err := lock.Open(ctx, "postgres://app@db.example.com/app?sslmode=verify-full")
//
// A key is locked with pg_try_advisory_lock / pg_advisory_lock (the _shared
// variants for shared locks) on the bigint LockID(prefix, key) and released with
// pg_advisory_unlock. The locks belong to one database session: a dropped
// connection, a killed backend or a server restart releases them at once on the
// server, and the driver reports every lock of that session lost. The recipe,
// the proofs and the measured figures are in
// https://github.com/distlock/lock/blob/main/docs/backends/postgres.md.
//
// # URL format
//
//	postgres://user:password@host:5432/dbname?sslmode=verify-full   (also postgresql://)
//	postgres:///dbname?host=/var/run/postgresql                    (Unix socket)
//	postgres://host/db?max_lock_conns=4&locks_per_conn=500&holders=true
//
// The URL is parsed by pgxpool.ParseConfig: every libpq parameter works
// (connect_timeout defaults to 10s here), as do the PG* environment variables and
// ~/.pgpass; any other parameter is sent to the server as a session setting. The
// portable parameters (ttl, auto_refresh, prefix, open_timeout, close_timeout)
// never reach PostgreSQL. The driver's own, removed before pgx sees the URL:
//
//   - max_lock_conns (default 10, at least 2): the most lock connections
//     (WithMaxConns).
//   - locks_per_conn (default 2000): locks on one connection before another is
//     opened (WithLocksPerConn).
//   - fencing (default true): false needs no sequence and gives no tokens
//     (WithFencing).
//   - fence_sequence (default <prefix>_fence): the sequence tokens come from
//     (WithFenceSequence).
//   - fence_create (default true): false never runs CREATE SEQUENCE
//     (WithFenceCreate).
//   - holders (default false): true keeps a row per hold, for owner names, List,
//     ForceRelease and Proclaim (WithHolders; see Inspection, eviction and
//     leader election).
//
// Users who already have a *pgxpool.Pool use New instead of a URL.
//
// # Capabilities
//
//   - Fencing: yes; tokens come from one CACHE 1 sequence, drawn in the statement
//     that takes the lock, durable across restarts.
//   - Expiring: no; a lock lives as long as its session; the TTL bounds how long
//     it is trusted without a confirmed ping.
//   - Notify: yes; a waiter sits in PostgreSQL's own lock queue and is granted the
//     lock by the server.
//   - FIFO: yes for exclusive and shared locks (the server's queue); permit
//     waiters are not ordered across slots.
//   - Shared and WriterPreference: yes; PostgreSQL holds back shared requests that
//     arrive after a waiting exclusive one.
//   - Permits: yes; a semaphore of n is n advisory locks; another n is
//     driver.ErrInvalidArgument where the driver sees it.
//   - MinTTL and MaxTTL: 10ms and 366 days (driver.FloorTTL,
//     driver.DefaultMaxTTL).
//
// # Lock ids
//
// LockID(prefix, key) is the first 8 bytes of the SHA-256 of prefix + "\n" + key,
// as a signed bigint. An operator computes it in psql (PostgreSQL 11 or later)
// and can take, test or inspect the same lock (pg_locks shows it with locktype
// 'advisory'):
//
//	SELECT ('x' || encode(substring(sha256(convert_to('distlock' || chr(10) || 'invoice:42', 'UTF8')) for 8), 'hex'))::bit(64)::bigint;
//
// A key a text value cannot hold (a NUL byte) is hashed as bytes:
//
//	sha256(convert_to('distlock' || chr(10), 'UTF8') || '\x6b6579'::bytea)
//
// # Connections
//
// Many locks share one lock connection, opened with the pool's configuration
// but outside the pool; a new one is opened when the others are busy or hold
// locks_per_conn locks. The driver never requests an id on a connection that
// holds it. A blocking Acquire waits in the server's queue on a connection of
// its own; at most max_lock_conns-1 wait at once, and further waiters retry
// after their backoff. A statement still unanswered when its caller gives up
// goes on in the background, owned by the driver. AcquireAll and
// TryAcquireAll take free keys in one statement on one connection, all or
// nothing, under one fencing token; a key held or queued for, and
// semaphores, send them one at a time.
//
// # Read-write locks and semaphores
//
// The queueing rule is PostgreSQL's: once a writer waits, readers that arrive
// after it wait behind it. A semaphore of n permits is n slot locks,
// PermitID(prefix, key, i), all tried in one statement; a permit given back is
// announced to one waiter per client with pg_notify. All users of a semaphore must give the same n.
//
// # Lost locks
//
// A closed session (pg_terminate_backend, a crash, a restart) closes Lost as soon
// as the kernel sees the close on Linux, otherwise at the next refresh, which
// pings each lock connection once per batch. Causes: lock.ErrSessionExpired,
// lock.ErrServerChanged, lock.ErrForceReleased, lock.ErrExpired.
//
// # Inspection, eviction and leader election
//
// Without holders=true, Inspect reads pg_locks (holders named "postgres pid
// <pid>", no token) and List, Relabel and ForceRelease return
// lock.ErrUnsupported. With it, the unlogged table <prefix>_holders names every
// hold; ForceRelease tells a driver holder to let go (NOTIFY distlock_evict) and
// ends any other holding session with pg_terminate_backend.
//
// # Limits
//
//   - Session locks do not work through a transaction-pooling proxy (PgBouncer
//     pool_mode=transaction): the driver detects it and refuses with
//     ErrTransactionPooler. Use a direct connection or session pooling.
//   - Advisory locks are not replicated: a failover to a standby loses every lock.
//   - A network cut is noticed by the server after tcp_user_timeout (30s): keep
//     the TTL at or below it.
//   - Each waiting Acquire keeps a server connection busy (up to
//     max_lock_conns-1).
package pgadvisory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// ErrFenceSequence is wrapped by the error of an acquire when the fencing
// sequence is missing and may not be created, cannot be created, cannot be used,
// or is not fit to give fencing tokens.
var ErrFenceSequence = errors.New("pgadvisory: fencing sequence unusable")

// ErrTransactionPooler is wrapped by errors and loss causes when consecutive
// statements on one connection ran on different server sessions: a
// transaction-pooling proxy is between the driver and PostgreSQL, and session
// advisory locks cannot work through it. It matches driver.ErrUnsupported (and
// so lock.ErrUnsupported): the configuration is not supported, and retrying does
// not help. Once seen, every later acquire of the Driver fails with it.
var ErrTransactionPooler = fmt.Errorf("pgadvisory: statements of one connection ran on different server sessions: a transaction-pooling proxy (such as PgBouncer with pool_mode=transaction) is in between; session advisory locks need a direct connection or session pooling (%w)", driver.ErrUnsupported)

// Driver takes PostgreSQL session advisory locks. Use it through lock.New or
// lock.Open; its methods implement driver.Driver, driver.Acquirer,
// driver.SetAcquirer, driver.BatchRefresher, driver.Inspector, driver.Lister,
// driver.Evictor and driver.Labeler (the last three, and Inspect's owners,
// labels and tokens, need WithHolders).
type Driver struct {
	cfg      *pgxpool.Config // sessions are opened with its ConnConfig and hooks
	sockets  sockets         // every connection dialed, closed by Close
	o        options
	tag      string             // application_name of the lock sessions
	settings [2][]string        // session settings of lock sessions: names, values
	lockID   func(string) int64 // LockID under the prefix; a test hook may replace it
	grace    time.Duration      // stmtGrace; a test hook may lengthen it

	stmts    atomic.Pointer[lockStatements] // set once the fencing sequence is resolved
	fenceSem chan struct{}                  // held (one token) while the sequence is resolved
	fence    uint32                         // the sequence's OID

	closing context.Context // cancelled by Close, to end waits
	stop    context.CancelFunc
	calls   kit.Calls // work in flight in the driver's goroutines (see handoff.go); closed with d.closed

	mu       sync.Mutex
	closed   bool
	conns    []*lockConn
	creating int                          // connections being opened, counted against the cap
	byOwner  map[ownerKey]*holding        // every held lock
	ids      map[int64]idUse              // held lock ids across all connections
	epoch    time.Time                    // the server's start time, seen by the first connection
	pooler   error                        // set when a transaction pooler was detected: every acquire fails
	recent   [contendedSlots]contention   // keys recently found held, waited for without a try
	changed  chan struct{}                // closed and replaced when a connection may have become usable
	sweeper  *time.Timer                  // closes connections idle too long; nil when none is due
	watch    atomic.Pointer[sessionWatch] // started with the first connection; nil before, or where there is none

	perms        map[string]permitUse       // semaphores with permits held here, by key
	permitID     func(string, int) int64    // PermitID under the prefix
	permitTurn   atomic.Uint32              // turns the first slot a permit request tries
	listener     *permitListener            // the session listening for permits given back, or nil; guarded by mu
	shapeChecked [contendedSlots]contention // semaphores recently checked for another shape (see shapeCheckDue); guarded by mu
	bellSeq      uint64                     // permit waits begun (d.mu), to tell the earliest first
	rescan       [2]time.Duration           // permitRescan and permitRescanListening; a test hook may lengthen them

	aux auxConns // holders rows, Inspect, List, ForceRelease (see holders.go)
}

type ownerKey struct{ key, owner string }

// idUse counts the holders of one lock id in this Driver.
type idUse struct{ n, exclusive int }

// holding is one held lock.
type holding struct {
	k       ownerKey
	id      int64
	shared  bool
	permits int // the semaphore's n for a permit, else 0
	c       *lockConn
	token   uint64
	start   time.Time
	lost    driver.LossReporter

	// Guarded by d.mu.
	release *pendingRelease // an unlock in flight, or nil
	// gone marks an entry kept in byOwner only to report to a later Release
	// the outcome of an unlock whose caller gave up waiting (outcome: nil if
	// it freed the lock). It is no longer in c.locks or ids; the next Release
	// or Refresh of the lock removes it.
	gone    bool
	outcome error
}

// pendingRelease is an unlock in flight; done is closed once its outcome is in
// the books.
type pendingRelease struct{ done chan struct{} }

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.SetAcquirer    = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
	_ driver.Inspector      = (*Driver)(nil)
	_ driver.Lister         = (*Driver)(nil)
	_ driver.Evictor        = (*Driver)(nil)
	_ driver.Labeler        = (*Driver)(nil)
)

// New returns a Driver that opens its lock connections with pool's
// configuration (connection string, TLS, BeforeConnect and AfterConnect hooks)
// but outside the pool, so the pool's capacity for queries is not reduced and
// no connection of the pool ever holds a lock. Closing the Driver does not close
// the pool. New does not connect; the first lock does. It fails only for an
// invalid option.
func New(pool *pgxpool.Pool, opts ...Option) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("pgadvisory: New with a nil pool")
	}
	return newDriver(pool.Config(), defaultOptions().apply(opts))
}

// newDriver makes a Driver for cfg, which it keeps (pass a copy).
func newDriver(cfg *pgxpool.Config, o options) (*Driver, error) {
	if o.err != nil {
		return nil, o.err
	}
	params := cfg.ConnConfig.RuntimeParams
	d := &Driver{
		cfg:      cfg,
		o:        o,
		tag:      applicationName(params["application_name"]),
		settings: sessionSettings(params),
		byOwner:  map[ownerKey]*holding{},
		ids:      map[int64]idUse{},
		perms:    map[string]permitUse{},
		grace:    stmtGrace,
		rescan:   [2]time.Duration{permitRescan, permitRescanListening},
		fenceSem: make(chan struct{}, 1),
		aux:      newAuxConns(),
	}
	prefix := o.prefix
	d.calls.RunAfterClose = true // Close cuts every socket: a call then ends at once
	d.lockID = func(key string) int64 { return LockID(prefix, key) }
	d.permitID = func(key string, i int) int64 { return PermitID(prefix, key, i) }
	d.closing, d.stop = context.WithCancel(context.Background())
	d.sockets.init()
	return d, nil
}

// applicationName returns a tag unique to one Driver, after the application name
// the connection string gives, if any (PostgreSQL keeps 63 bytes of it).
func applicationName(base string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("pgadvisory: crypto/rand failed: " + err.Error())
	}
	tag := "distlock-" + hex.EncodeToString(b[:])
	if base == "" {
		return tag
	}
	const maxBase = 63 - len("distlock-000000000000") - len(" ()")
	for len(base) > maxBase {
		base = base[:len(base)-1]
		for len(base) > 0 && base[len(base)-1]&0xc0 == 0x80 { // keep whole UTF-8 sequences
			base = base[:len(base)-1]
		}
	}
	return base + " (" + tag + ")"
}

// sessionSettings are the settings of every lock session (see Connections in the
// package documentation). Timeouts that would end a wait or an idle holding
// session are always off; keepalive settings apply unless the connection
// string sets them.
func sessionSettings(userSet map[string]string) [2][]string {
	var names, vals []string
	set := func(name, val string, always bool) {
		if _, ok := userSet[name]; ok && !always {
			return
		}
		names = append(names, name)
		vals = append(vals, val)
	}
	for _, t := range []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout", "idle_session_timeout"} {
		set(t, "0", true)
	}
	set("tcp_keepalives_idle", "10", false)
	set("tcp_keepalives_interval", "5", false)
	set("tcp_keepalives_count", "3", false)
	set("tcp_user_timeout", "30000", false)
	set("client_connection_check_interval", "5000", false)
	return [2][]string{names, vals}
}

// ApplicationName returns the application_name of the Driver's lock sessions,
// unique to this Driver: an operator (or a test) finds them with
// SELECT pid FROM pg_stat_activity WHERE application_name = '<it>'.
func (d *Driver) ApplicationName() string { return d.tag }

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: d.o.fencing, Notify: true, FIFO: true, Shared: true, WriterPreference: true, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: driver.DefaultMaxTTL}
}

// pooled records that c's statements ran on another server session (with pid,
// or 0 if unknown) and returns the error that says so. A lock taken on such a
// connection may be stranded on a session the driver no longer reaches, so
// the Driver takes no more.
func (d *Driver) pooled(c *lockConn, pid int32) error {
	err := fmt.Errorf("%w (backend pid %d at setup, then another)", ErrTransactionPooler, c.pid)
	if pid != 0 {
		err = fmt.Errorf("%w (backend pid %d at setup, then %d)", ErrTransactionPooler, c.pid, pid)
	}
	d.mu.Lock()
	if d.pooler == nil {
		d.pooler = err
	}
	d.mu.Unlock()
	return err
}

// heldBy reports the grant of req.Owner if it already holds req.Key.
func (d *Driver) heldBy(req *driver.Request) (driver.Grant, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.Grant{}, false, driver.ErrClosed
	}
	if d.pooler != nil {
		return driver.Grant{}, false, d.pooler
	}
	if h := d.byOwner[ownerKey{req.Key, req.Owner}]; h != nil && !h.gone {
		return driver.Grant{Token: h.token, Start: h.start}, true, nil
	}
	if req.Permits >= 2 || len(d.perms) > 0 {
		return driver.Grant{}, false, d.shapeMismatchLocked(req)
	}
	return driver.Grant{}, false, nil
}

// conflicts reports whether a request for id in the given mode cannot be
// granted in this process because another owner here holds id.
func (d *Driver) conflicts(id int64, shared bool) bool {
	u := d.ids[id]
	return u.n > 0 && (!shared || u.exclusive > 0)
}

// register records a lock just taken on c, granted as g (its token dropped
// without fencing), and returns that grant; c.mu is held, so c's bookkeeping
// matches the session before anyone else sends a statement on it. After Close it
// returns driver.ErrClosed: Close is about to close c, which drops the lock.
// With a claim, shared by the attempts of one permit request, it records only
// the first grant and returns errClaimed for any other, which its caller
// gives back.
func (d *Driver) register(c *lockConn, req *driver.Request, id int64, g driver.Grant, claim *atomic.Bool) (driver.Grant, error) {
	if !d.o.fencing {
		g.Token = 0
	}
	h := &holding{k: ownerKey{req.Key, req.Owner}, id: id, shared: req.Shared, permits: req.Permits, c: c, token: g.Token, start: g.Start, lost: req.Lost}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.Grant{}, errClosed
	}
	if c.dead.Load() {
		return driver.Grant{}, errSessionLost(errors.New("connection given up as the lock was taken"))
	}
	if claim != nil && !claim.CompareAndSwap(false, true) {
		// A permit request waiting on one slot and trying another at once:
		// the first grant registered is the request's, the other is given
		// back by the caller.
		return driver.Grant{}, errClaimed
	}
	c.locks[id] = h
	d.byOwner[h.k] = h
	u := d.ids[id]
	u.n++
	if !h.shared {
		u.exclusive++
	}
	d.ids[id] = u
	d.bookPermitLocked(h, 1)
	return g, nil
}

// forgetLocked drops h from the bookkeeping; d.mu is held. Forgetting h twice
// is harmless.
func (d *Driver) forgetLocked(h *holding) {
	if d.byOwner[h.k] == h {
		delete(d.byOwner, h.k)
	}
	d.unbookLocked(h)
}

// unbookLocked drops h from its connection's locks and from the ids held, but
// not from byOwner; d.mu is held. A lock is counted in ids exactly while it is
// in its connection's locks.
func (d *Driver) unbookLocked(h *holding) {
	if h.c.locks[h.id] != h {
		return // already dropped, or its connection given up
	}
	delete(h.c.locks, h.id)
	d.bookPermitLocked(h, -1)
	u := d.ids[h.id]
	u.n--
	if !h.shared {
		u.exclusive--
	}
	if u.n <= 0 {
		delete(d.ids, h.id)
	} else {
		d.ids[h.id] = u
	}
}

// broadcastLocked wakes everyone waiting for a usable connection; d.mu is held.
// The channels are made only when someone waits, so the common case costs
// nothing.
func (d *Driver) broadcastLocked() {
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
}

// changedLocked returns the channel broadcastLocked closes; d.mu is held.
func (d *Driver) changedLocked() <-chan struct{} {
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	return d.changed
}

// Close ends every lock session: the server releases the locks still held, as
// it would for a process that ended, and each is reported lost. Waiting Acquire
// calls return driver.ErrClosed; their waits are cancelled on the server first,
// so they leave its lock queue at once. Close does not wait for a server that
// does not answer: after at most closeBudget it closes every socket the driver
// opened. A pool given to New is not closed. Later calls return
// driver.ErrClosed; closing twice returns nil.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.calls.Close()
	d.stop()
	if d.sweeper != nil {
		d.sweeper.Stop()
		d.sweeper = nil
	}
	conns := d.conns
	d.conns = nil
	var lost []driver.LossReporter
	for _, h := range d.byOwner {
		if h.lost != nil {
			lost = append(lost, h.lost)
		}
		h.c.locks = nil
	}
	d.byOwner = map[ownerKey]*holding{}
	d.ids = map[int64]idUse{}
	d.perms = map[string]permitUse{}
	d.broadcastLocked()
	watch := d.watch.Load()
	d.mu.Unlock()

	// A wait is cancelled on the server, so that it leaves the lock queue now:
	// a session whose socket is only closed stays queued until the server
	// next checks on its client, and may be granted the lock meanwhile.
	var aborts sync.WaitGroup
	for _, c := range conns {
		c.dead.Store(true)
		if a := c.abort.Load(); a != nil {
			aborts.Add(1)
			go func() {
				defer aborts.Done()
				a.abort()
			}()
		}
	}
	aborted := make(chan struct{})
	go func() {
		aborts.Wait()
		close(aborted)
	}()
	// Any other statement in flight is cut: its session ends anyway.
	for _, c := range conns {
		if c.mu.TryLock() {
			c.closeConn()
			c.mu.Unlock()
		} else if c.abort.Load() == nil {
			_ = c.net.SetDeadline(time.Unix(1, 0))
		}
	}
	t := time.NewTimer(closeBudget)
	select {
	case <-aborted:
	case <-t.C:
		// The server does not answer the cancels: stop waiting for it.
		d.sockets.closeAll()
	}
	t.Stop()
	for _, c := range conns {
		c.mu.Lock() // a waiter lets go once its wait has returned
		c.closeConn()
		c.mu.Unlock()
	}
	// Sockets still open belong to pgx's clean-up of failed connections
	// (their cancel requests), which a silent server would keep for seconds.
	d.sockets.closeAll()
	<-aborted
	// pgx's clean-up ends at once now that its sockets are closed; wait for
	// it, within a bound, so that no goroutine of the driver's outlives Close.
	cleanup, cancel := context.WithTimeout(context.Background(), cleanupBudget)
	for _, c := range conns {
		select {
		case <-c.cleaned:
		case <-cleanup.Done():
		}
	}
	cancel()
	// Work whose callers stopped waiting (see handoff.go) ends at once now
	// that every socket is closed.
	d.calls.Wait()
	d.closeAux()
	if watch != nil {
		watch.close()
	}
	cause := fmt.Errorf("%w: the driver was closed, which ended its sessions", driver.ErrNotHeld)
	for _, f := range lost {
		f.Lost(cause)
	}
	return nil
}
