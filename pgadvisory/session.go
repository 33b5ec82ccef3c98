package pgadvisory

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// lockConn is one dedicated session, taken out of the pool for good. It either
// holds locks (any number, each id at most once) and runs short statements, or
// waits for one lock in PostgreSQL's queue, holding nothing else.
type lockConn struct {
	d    *Driver
	mu   connMutex // held for every statement: one at a time on a session
	conn *pgx.Conn // guarded by mu; nil once closed
	net  net.Conn  // conn's socket, for cutting it from another goroutine
	pid  int32     // pg_backend_pid() at setup; every lock statement checks it
	rtt  time.Duration
	dead atomic.Bool // the session is gone or untrusted; set with d.mu held

	cleaned <-chan struct{} // closed once pgx has let go of the connection's resources
	watchID int32           // the connection's id in d.watch, guarded by the watch's mutex

	abort atomic.Pointer[waitAbort] // ends the blocking statement in flight, if any

	// Guarded by mu.
	prepare  bool      // statements are prepared on the session (see run)
	prepared uint16    // the stmt bits of those prepared so far
	params   [3][]byte // the binary arguments: lock id, pid, fencing sequence
	ids      []int64   // a set statement's lock ids (see stmt.set)
	idArg    [8]byte
	pidArg   [4]byte
	fenceArg [4]byte

	// Guarded by d.mu.
	locks     map[int64]*holding
	users     int  // callers that picked the connection and have not let go
	waiting   bool // a blocking lock statement is in flight
	start     time.Time
	idleSince time.Time // when it last became idle holding nothing

	pings kit.Round[struct{}] // a ping not yet sent, which later callers join
}

// Bounds on how long the driver waits for the server.
const (
	// stmtGrace is how long a statement may run past its caller's deadline
	// before the session is given up as unresponsive. Statements on lock
	// sessions are never cancelled on the server (that could end a statement
	// of another lock), so an answer that does not come means a dead peer.
	// The caller does not wait for it: it has returned (see runFor).
	stmtGrace = time.Second
	// cancelWait is how long a cancelled wait may take to return after a cancel
	// request was delivered before the request is sent again; after
	// cancelAttempts the session is given up.
	cancelWait     = 200 * time.Millisecond
	cancelAttempts = 3
	// closeTimeout bounds the goodbye on a connection being closed.
	closeTimeout = time.Second
	// closeBudget bounds how long Close gives the server to take waits out of
	// its queue before it closes every socket; cleanupBudget how long it then
	// waits for pgx to let go of the closed connections (at once, normally).
	closeBudget   = 500 * time.Millisecond
	cleanupBudget = 250 * time.Millisecond
)

// dial opens a lock connection and sets it up as a lock session, within ctx
// and the connect timeout.
func (d *Driver) dial(ctx context.Context) (*lockConn, error) {
	conn, err := d.connect(ctx)
	if err != nil {
		return nil, withCtxErr(ctx, fmt.Errorf("pgadvisory: connect: %w", err))
	}
	c := &lockConn{d: d, mu: newConnMutex(), conn: conn, net: conn.PgConn().Conn(), cleaned: conn.PgConn().CleanupDone(), locks: map[int64]*holding{}}
	sctx, cancel := context.WithTimeout(ctx, d.connectTimeout())
	err = c.setup(sctx)
	cancel()
	if err != nil {
		c.closeConn()
		return nil, withCtxErr(ctx, err)
	}
	return c, nil
}

// withCtxErr makes err, from a step that ctx may have cut short, match ctx's
// error if ctx has ended: pgx reports a dial or read cut short by ctx's
// deadline as a timeout of its own, sometimes before ctx itself says it has
// ended.
func withCtxErr(ctx context.Context, err error) error {
	if cerr := ctxEnded(ctx); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
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
	// The query modes that do not cache statements are for proxies that cannot
	// keep prepared ones; the driver leaves those to pgx. In the others it
	// prepares its own statements (see run), and this one, run once, is not
	// worth keeping on the session.
	mode := c.conn.Config().DefaultQueryExecMode
	c.prepare = mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeCacheDescribe
	if c.prepare {
		mode = pgx.QueryExecModeExec
	}
	begin := time.Now()
	// The session holds nothing yet: it is given up as soon as ctx ends.
	done := c.watchWithin(ctx, 0)
	err := c.conn.QueryRow(context.Background(), setupSQL, mode, c.d.tag, c.d.settings[0], c.d.settings[1]).
		Scan(&pid, &start, &recovery, &app, &n, &sync)
	done(err == nil)
	if err != nil {
		return fmt.Errorf("pgadvisory: set up lock session: %w", err)
	}
	if recovery {
		return errors.New("pgadvisory: the server is a standby (in recovery): advisory locks there are not shared with the primary; connect to the primary (target_session_attrs=read-write)")
	}
	c.pid, c.start, c.rtt = pid, start, time.Since(begin)
	binary.BigEndian.PutUint32(c.pidArg[:], uint32(pid))
	c.params = [3][]byte{c.idArg[:], c.pidArg[:], c.fenceArg[:]}
	return nil
}

// closeConn closes the connection; c.mu is held (or c is not shared).
func (c *lockConn) closeConn() {
	if c.conn == nil {
		return
	}
	if w := c.d.watch.Load(); w != nil {
		w.remove(c)
	}
	closeQuickly(c.conn)
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
	return c.watchWithin(ctx, c.d.grace)
}

// watchWithin is watch with the given grace.
func (c *lockConn) watchWithin(ctx context.Context, grace time.Duration) func(ok bool) {
	if ctx.Done() == nil {
		return func(bool) {}
	}
	w := &stmtWatch{net: c.net, grace: grace}
	w.stop = context.AfterFunc(ctx, w.ctxDone)
	return w.finish
}

// stmtWatch is one statement's watch (see watch): one allocation, not one per
// variable its closures would share.
type stmtWatch struct {
	net      net.Conn
	grace    time.Duration
	stop     func() bool
	mu       sync.Mutex
	timer    *time.Timer
	finished bool
	cut      bool
}

func (w *stmtWatch) ctxDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.finished {
		w.timer = time.AfterFunc(w.grace, w.cutNow)
	}
}

func (w *stmtWatch) cutNow() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.finished {
		w.cut = true
		_ = w.net.SetDeadline(time.Unix(1, 0))
	}
}

func (w *stmtWatch) finish(ok bool) {
	w.stop()
	w.mu.Lock()
	w.finished = true
	if w.timer != nil {
		w.timer.Stop()
	}
	wasCut := w.cut
	w.mu.Unlock()
	if wasCut && ok {
		// The answer came just before the cut: the session is fine.
		_ = w.net.SetDeadline(time.Time{})
	}
}

// exec runs one short statement on c and returns its value; c.mu is held. It
// sends nothing if ctx has already ended.
func (c *lockConn) exec(ctx context.Context, s *stmt, id int64) (result, error) {
	if err := c.usable(); err != nil {
		return result{}, err
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	done := c.watch(ctx)
	r, err := c.run(s, id)
	done(err == nil)
	return r, err
}

// result is a statement's value: a token (bigint or integer), a boolean (1 or
// 0), or NULL; and for a statement on a semaphore's slots (stmt.slots), the
// index of the slot its try took (-1: none, or the first by a wait).
type result struct {
	v    int64
	null bool
	at   int
}

// binaryFormat asks for parameters and results in binary.
var binaryFormat = []int16{1, 1, 1}

// run sends s with the lock id id (unused by statements without parameters)
// and reads its value; c.mu is held. The statement is prepared on the session
// the first time (in the same exchange), then costs a Bind and an Execute with
// its arguments in binary, without pgx's type mapping (see conclude).
func (c *lockConn) run(s *stmt, id int64) (result, error) {
	if !c.prepare {
		return c.runUnprepared(s, id)
	}
	a := &answer{}
	err := c.send(s, id, a)
	if err == nil {
		err = c.receive(a)
	}
	return c.conclude(s, a, err)
}

// decode reads a binary value of type oid.
func decode(oid uint32, b []byte) (result, error) {
	switch {
	case b == nil:
		return result{null: true}, nil
	case oid == pgtype.Int8OID && len(b) == 8:
		return result{v: int64(binary.BigEndian.Uint64(b))}, nil
	case oid == pgtype.Int4OID && len(b) == 4:
		return result{v: int64(int32(binary.BigEndian.Uint32(b)))}, nil
	case oid == pgtype.BoolOID && len(b) == 1:
		return result{v: int64(b[0])}, nil
	}
	return result{}, fmt.Errorf("pgadvisory: unexpected value of type %d (%d bytes)", oid, len(b))
}

// runUnprepared is run in the query mode the connection string chose.
func (c *lockConn) runUnprepared(s *stmt, id int64) (result, error) {
	args := []any{id, c.pid, c.d.fence}[:len(s.oids)]
	if s.set {
		args[0] = c.ids
	}
	var v any
	var at int
	dest := []any{&v, &at}[:1]
	if s.slots {
		dest = dest[:2]
	}
	if err := c.conn.QueryRow(context.Background(), s.sql, args...).Scan(dest...); err != nil {
		return result{}, err
	}
	switch v := v.(type) {
	case nil:
		return result{null: true}, nil
	case int64:
		return result{v: v, at: at}, nil
	case int32:
		return result{v: int64(v), at: at}, nil
	case bool:
		if v {
			return result{v: 1}, nil
		}
		return result{}, nil
	}
	return result{}, fmt.Errorf("pgadvisory: unexpected value %T from %s", v, s.name)
}

// broken reports whether err from a statement on c means the session is gone
// (the connection is closed); c.mu is held.
func (c *lockConn) broken(err error) bool {
	return err != nil && (c.conn == nil || c.conn.IsClosed())
}

// ping confirms that c's session is alive and the same. A caller that arrives
// while a ping is queued but not yet sent joins it (c.pings), so refreshes of
// many locks on one connection share a round trip without trusting an answer
// older than their own call. A caller whose context ends returns at once; a
// ping already sent goes on without it (see roundTrip), and the callers that
// joined it and still have time send another.
func (c *lockConn) ping(ctx context.Context) error {
	led := false
	_, err := c.pings.Share(ctx, time.Now(), time.Time{}, func(ctx context.Context, sent func()) (struct{}, error) {
		led = true
		return struct{}{}, c.sendPing(ctx, sent)
	})
	if !led && err != nil && err == ctx.Err() {
		return errNoAnswer("ping", err)
	}
	return err
}

// sendPing sends a ping once c's session is free, calling sent as it goes.
func (c *lockConn) sendPing(ctx context.Context, sent func()) error {
	if err := c.mu.LockContext(ctx); err != nil {
		return errBusy("ping", err) // not sent: the callers that joined send one
	}
	sent()
	if c.dead.Load() || c.conn == nil {
		c.unlock()
		return errSessionLost(errors.New("connection given up"))
	}
	if err := ctx.Err(); err != nil {
		c.unlock()
		return err
	}
	_, err, gaveUp := roundTrip(c.d, ctx, trip{c: c, s: pingStmt},
		func(_ *kit.Handoff[struct{}], r result, err error) (struct{}, error) {
			return struct{}{}, c.pinged(r, err)
		},
		c.unlock)
	if gaveUp {
		return errNoAnswer("ping", err)
	}
	return err
}

// pinged judges the answer to a ping (c.mu held), giving up a session that is
// gone or not the one the connection was set up on.
func (c *lockConn) pinged(r result, err error) error {
	pid := int32(r.v)
	switch {
	case c.broken(err):
		cause := errSessionLost(err)
		c.d.kill(c, cause)
		return cause
	case err != nil:
		return err
	case r.null || pid != c.pid:
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
	var lost []driver.LossReporter
	for _, h := range c.locks {
		d.forgetLocked(h)
		if h.lost != nil {
			lost = append(lost, h.lost)
		}
	}
	c.locks = map[int64]*holding{}
	d.broadcastLocked()
	d.mu.Unlock()
	for _, f := range lost {
		f.Lost(cause)
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

// errServerClosed is how a session ends when the server closes its connection.
var errServerClosed = errors.New("the server closed the connection (a restart or crash of the server, or its backend was terminated)")

// sessionEnded gives up c, whose connection the server closed: every lock it
// held is reported lost now rather than at the next refresh. The connection is
// closed here if idle; a statement in flight fails on the closed connection,
// and its caller closes it.
func (d *Driver) sessionEnded(c *lockConn) {
	d.kill(c, errSessionLost(errServerClosed))
	if c.mu.TryLock() {
		c.unlock()
	}
}

// ctxEnded returns ctx's error, or context.DeadlineExceeded once its deadline
// has passed (a socket deadline taken from ctx can fire before ctx's own timer).
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// Lock sessions are opened by the driver itself, with the configuration of the
// pool it was given (or made from the URL), its BeforeConnect and AfterConnect
// hooks included, but not through the pool: a pool creates connections in the
// background, beyond the context of the call that asked for one, and counts
// them against its capacity until they are hijacked.

// defaultConnectTimeout bounds one attempt to open a session (dial, TLS,
// authentication) when the connection string sets no connect_timeout, and the
// setup statement that follows; a call's own context may end it sooner.
const defaultConnectTimeout = 10 * time.Second

func (d *Driver) connectTimeout() time.Duration {
	if t := d.cfg.ConnConfig.ConnectTimeout; t > 0 {
		return t
	}
	return defaultConnectTimeout
}

// connect opens a connection with the driver's configuration, within ctx and
// the connect timeout.
func (d *Driver) connect(ctx context.Context) (*pgx.Conn, error) {
	cc := d.cfg.ConnConfig.Copy()
	cc.ConnectTimeout = d.connectTimeout()
	if d.cfg.BeforeConnect != nil {
		if err := d.cfg.BeforeConnect(ctx, cc); err != nil {
			return nil, err
		}
	}
	dial := cc.DialFunc
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
	}
	cc.DialFunc = d.sockets.wrap(dial)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if d.cfg.AfterConnect != nil {
		if err := d.cfg.AfterConnect(ctx, conn); err != nil {
			closeQuickly(conn)
			return nil, err
		}
	}
	return conn, nil
}

// closeQuickly closes conn, giving the goodbye to the server at most
// closeTimeout (it is one small write, which a frozen server's socket buffer
// takes at once).
func closeQuickly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	_ = conn.Close(ctx)
	cancel()
}

// sockets are the network connections the driver dialed: those of its sessions
// and those of the cancel requests pgx sends for them (pgx's clean-up of a
// connection that failed gives its cancel request up to 15 seconds). Close
// closes every one at once, so that neither the driver nor pgx waits on a
// server that does not answer, and no dial succeeds after it.
type sockets struct {
	ctx    context.Context // ends when closeAll is called, and with it dials under way
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	open   map[*trackedConn]struct{}
}

func (s *sockets) init() { s.ctx, s.cancel = context.WithCancel(context.Background()) }

// wrap returns dial, tracked.
func (s *sockets) wrap(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errClosed
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		t := &trackedConn{Conn: nc, s: s}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			_ = nc.Close()
			return nil, errClosed
		}
		if s.open == nil {
			s.open = map[*trackedConn]struct{}{}
		}
		s.open[t] = struct{}{}
		return t, nil
	}
}

// closeAll closes every connection still open and refuses later dials.
func (s *sockets) closeAll() {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for t := range open {
		_ = t.Conn.Close()
	}
}

// trackedConn is a dialed connection that leaves the set when closed.
type trackedConn struct {
	net.Conn
	s *sockets
}

func (t *trackedConn) Close() error {
	t.s.mu.Lock()
	delete(t.s.open, t)
	t.s.mu.Unlock()
	return t.Conn.Close()
}

// NetConn returns the connection the dialer made, as tls.Conn.NetConn does.
func (t *trackedConn) NetConn() net.Conn { return t.Conn }

// socketOf finds the socket under c, unwrapping TLS and the tracking, or nil
// when there is none (a connection from a dialer of the user's own).
func socketOf(c net.Conn) syscall.Conn {
	for range 8 {
		if sc, ok := c.(syscall.Conn); ok {
			return sc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		if c = u.NetConn(); c == nil {
			return nil
		}
	}
	return nil
}
