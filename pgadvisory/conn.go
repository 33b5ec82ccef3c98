package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock/driver"
)

// lockConn is one dedicated session, taken out of the pool for good. It either
// holds locks (any number, each id at most once) and runs short statements, or
// waits for one lock in PostgreSQL's queue, holding nothing else.
type lockConn struct {
	d    *Driver
	mu   sync.Mutex // held for every statement: one at a time on a session
	conn *pgx.Conn  // guarded by mu; nil once closed
	net  net.Conn   // conn's socket, for cutting it from another goroutine
	pid  int32      // pg_backend_pid() at setup; every lock statement checks it
	rtt  time.Duration
	dead atomic.Bool // the session is gone or untrusted; set with d.mu held

	// Guarded by d.mu.
	locks     map[int64]*holding
	users     int  // callers that picked the connection and have not let go
	waiting   bool // a blocking lock statement is in flight
	start     time.Time
	idleSince time.Time // when it last became idle holding nothing

	pingMu   sync.Mutex
	nextPing *pingCall // a ping not yet sent, which later callers join
}

type pingCall struct {
	done chan struct{}
	err  error
}

// Bounds on how long the driver waits for the server.
const (
	// stmtGrace is how long a statement may run past its caller's deadline
	// before the session is given up as unresponsive. Statements on lock
	// sessions are never cancelled on the server (that could end a statement
	// of another lock), so an answer that does not come means a dead peer.
	stmtGrace = time.Second
	// cancelWait is how long a cancelled wait may take to return after a cancel
	// request was delivered before the request is sent again; after
	// cancelAttempts the session is given up.
	cancelWait     = 200 * time.Millisecond
	cancelAttempts = 3
	// closeTimeout bounds the goodbye on a connection being closed.
	closeTimeout = time.Second
)

// queueToGrow is how many callers may be queued on the least busy connection
// before a new one is opened (below the cap): opening takes milliseconds,
// a statement about a hundred microseconds.
const queueToGrow = 4

// Connections that hold nothing are kept for later waits and locks: keepIdle of
// them for good, the others until they have been idle for idleTimeout, so a
// burst of waiters that comes back does not reconnect each time.
const (
	keepIdle    = 2
	idleTimeout = 30 * time.Second
)

// errSessionLost wraps the error by which the driver learned that a session ended.
func errSessionLost(err error) error {
	return fmt.Errorf("pgadvisory: lock session lost (the server releases its locks): %w", err)
}

// dial opens a lock connection: a pool connection hijacked from the pool and set
// up as a lock session.
func (d *Driver) dial(ctx context.Context) (*lockConn, error) {
	pc, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgadvisory: connect: %w", err)
	}
	conn := pc.Hijack()
	c := &lockConn{d: d, conn: conn, net: conn.PgConn().Conn(), locks: map[int64]*holding{}}
	if err := c.setup(ctx); err != nil {
		c.closeConn()
		return nil, err
	}
	return c, nil
}

// setup tags the session, reads its backend pid and its server's start time, and
// applies the lock session settings.
func (c *lockConn) setup(ctx context.Context) error {
	var (
		pid      int32
		start    time.Time
		recovery bool
		app      string
		n        int64
		sync     *string
	)
	begin := time.Now()
	done := c.watch(ctx)
	err := c.conn.QueryRow(context.Background(), setupSQL, c.d.tag, c.d.settings[0], c.d.settings[1]).
		Scan(&pid, &start, &recovery, &app, &n, &sync)
	done(err == nil)
	if err != nil {
		return fmt.Errorf("pgadvisory: set up lock session: %w", err)
	}
	if recovery {
		return errors.New("pgadvisory: the server is a standby (in recovery): advisory locks there are not shared with the primary; connect to the primary (target_session_attrs=read-write)")
	}
	c.pid, c.start, c.rtt = pid, start, time.Since(begin)
	return nil
}

// closeConn closes the connection; c.mu is held (or c is not shared).
func (c *lockConn) closeConn() {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	_ = c.conn.Close(ctx)
	cancel()
	c.conn = nil
}

// unlock lets go of c.mu, closing the connection first if it was given up.
func (c *lockConn) unlock() {
	if c.dead.Load() {
		c.closeConn()
	}
	c.mu.Unlock()
}

// usable reports why c cannot run a statement; c.mu is held.
func (c *lockConn) usable() error {
	if c.dead.Load() || c.conn == nil {
		return errSessionLost(errors.New("connection closed"))
	}
	return nil
}

// watch bounds a statement about to run on c by ctx: if ctx ends and the
// statement has not completed stmtGrace later, c's socket is cut, which fails the
// statement and the session. The returned function must be called when the
// statement completed, with whether it succeeded.
func (c *lockConn) watch(ctx context.Context) func(ok bool) {
	if ctx.Done() == nil {
		return func(bool) {}
	}
	var (
		mu       sync.Mutex
		timer    *time.Timer
		finished bool
		cut      bool
	)
	netConn := c.net
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		timer = time.AfterFunc(stmtGrace, func() {
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				cut = true
				_ = netConn.SetDeadline(time.Unix(1, 0))
			}
		})
	})
	return func(ok bool) {
		stop()
		mu.Lock()
		finished = true
		if timer != nil {
			timer.Stop()
		}
		wasCut := cut
		mu.Unlock()
		if wasCut && ok {
			// The answer came just before the cut: the session is fine.
			_ = netConn.SetDeadline(time.Time{})
		}
	}
}

// queryRow runs one short statement on c and scans its row; c.mu is held. It
// sends nothing if ctx has already ended.
func (c *lockConn) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := c.watch(ctx)
	err := c.conn.QueryRow(context.Background(), sql, args...).Scan(dest...)
	done(err == nil)
	return err
}

// broken reports whether err from a statement on c means the session is gone
// (the connection is closed); c.mu is held.
func (c *lockConn) broken(err error) bool {
	return err != nil && (c.conn == nil || c.conn.IsClosed())
}

// ping confirms that c's session is alive and the same. A caller that arrives
// while a ping is queued but not yet sent joins it, so refreshes of many locks on
// one connection share a round trip without trusting an answer older than their
// own call.
func (c *lockConn) ping(ctx context.Context) error {
	c.pingMu.Lock()
	p := c.nextPing
	leader := p == nil
	if leader {
		p = &pingCall{done: make(chan struct{})}
		c.nextPing = p
	}
	c.pingMu.Unlock()
	if !leader {
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	c.pingMu.Lock()
	c.nextPing = nil
	c.pingMu.Unlock()
	p.err = c.pingLocked(ctx)
	c.unlock()
	close(p.done)
	return p.err
}

func (c *lockConn) pingLocked(ctx context.Context) error {
	if c.dead.Load() {
		return errSessionLost(errors.New("connection given up"))
	}
	var pid int32
	err := c.queryRow(ctx, pingSQL, nil, &pid)
	switch {
	case c.broken(err):
		cause := errSessionLost(err)
		c.d.kill(c, cause)
		return cause
	case err != nil:
		return err
	case pid != c.pid:
		cause := c.d.pooled(c, pid)
		c.d.kill(c, cause)
		return cause
	}
	return nil
}

// kill gives up c: it forgets every lock c held and reports each lost with
// cause. The connection is closed by whoever holds c.mu when letting go of it.
func (d *Driver) kill(c *lockConn, cause error) {
	d.mu.Lock()
	if c.dead.Load() {
		d.mu.Unlock()
		return
	}
	c.dead.Store(true)
	d.removeLocked(c)
	var lost []func(error)
	for _, h := range c.locks {
		d.forgetLocked(h)
		if h.lost != nil {
			lost = append(lost, h.lost)
		}
	}
	c.locks = map[int64]*holding{}
	d.broadcastLocked()
	d.freedLocked()
	d.mu.Unlock()
	for _, f := range lost {
		f(cause)
	}
}

func (d *Driver) removeLocked(c *lockConn) {
	for i, x := range d.conns {
		if x == c {
			d.conns = append(d.conns[:i], d.conns[i+1:]...)
			return
		}
	}
}

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
	d.mu.Unlock()
	if len(stale) > 0 {
		cause := errSessionLost(fmt.Errorf("the server's start time changed from %v to %v (restarted, or failed over to another server)", stale[0].start, c.start))
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
			d.freedLocked()
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

// connForTry picks a connection to send a non-blocking statement about id on,
// opening one if all are busy and the cap allows, or waiting until one is
// usable. It returns driver.ErrLocked without a round trip when another owner in
// this process holds id in a conflicting mode.
func (d *Driver) connForTry(ctx context.Context, id int64, shared bool) (*lockConn, error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, errClosed
		}
		if d.conflicts(id, shared) {
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
			if c.waiting || c.locks[id] != nil {
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
		if best != nil {
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
		d.freedLocked()
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
