package pgadvisory

// A statement in flight, and the caller that may leave before its answer.
//
// Lock statements are sent and read at the wire-protocol level (Parse the first
// time on a session, then Bind, Describe, Execute, Sync), in the caller's
// goroutine. When the caller's context ends before the answer, the read is
// interrupted with a read deadline, which pgconn takes as a timeout that leaves
// the connection and the unread answer as they were; the reading, and what the
// answer means for the driver's books, then go on in a goroutine of the
// driver's (see handoff.go), and the caller returns. A statement is thus never
// cancelled on the server (which could end a statement of another lock on the
// same session) and the session is not given up, unless the answer still has
// not come stmtGrace after the context ended.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/distlock/lock/driver/kit"
)

// connMutex is a lock connection's statement lock (one statement at a time on
// a session): a mutex whose waiters can give up when their context ends.
type connMutex struct{ ch chan struct{} }

func newConnMutex() connMutex { return connMutex{ch: make(chan struct{}, 1)} }

func (m connMutex) Lock()   { m.ch <- struct{}{} }
func (m connMutex) Unlock() { <-m.ch }

func (m connMutex) TryLock() bool {
	select {
	case m.ch <- struct{}{}:
		return true
	default:
		return false
	}
}

// LockContext locks m, or returns ctx's error if ctx ends first.
func (m connMutex) LockContext(ctx context.Context) error {
	select {
	case m.ch <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flight watches one statement read for a caller: when the caller's context
// ends it interrupts the read (stopped), and grace later, if the answer has
// still not come, it cuts the session (cut). A flight with no grace is never
// cut by time: a wait is ended by its waitAbort instead.
type flight struct {
	c     *lockConn
	grace time.Duration
	stop  func() bool

	mu       sync.Mutex
	timer    *time.Timer
	stopped  bool
	cut      bool
	finished bool
}

// fly starts watching a statement about to be sent on c for a caller whose
// context is ctx; nil when ctx cannot end.
func (c *lockConn) fly(ctx context.Context, grace time.Duration) *flight {
	if ctx.Done() == nil {
		return nil
	}
	f := &flight{c: c, grace: grace}
	f.stop = context.AfterFunc(ctx, f.ctxDone)
	return f
}

func (f *flight) ctxDone() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished {
		return
	}
	f.stopped = true
	_ = f.c.net.SetReadDeadline(time.Unix(1, 0))
	if f.grace > 0 {
		f.timer = time.AfterFunc(f.grace, f.cutNow)
	}
}

// cutNow gives up the session: the read fails, and the connection is closed.
func (f *flight) cutNow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.finished {
		f.cut = true
		_ = f.c.net.SetDeadline(time.Unix(1, 0))
	}
}

// interrupted reports whether err is the read being stopped for the caller's
// context, with the answer still to be read; f may be nil.
func (f *flight) interrupted(err error) bool {
	if f == nil || err == nil || !pgconn.Timeout(err) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped && !f.cut && !f.c.conn.IsClosed()
}

// resume lifts the interruption so that the answer can be read on; false if
// the session has been cut or given up meanwhile (Close cuts sockets after
// marking their connections dead).
func (f *flight) resume() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut || f.c.dead.Load() {
		return false
	}
	_ = f.c.net.SetReadDeadline(time.Time{})
	return true
}

// end stops watching; f may be nil. A deadline set for a read that completed
// anyway is lifted.
func (f *flight) end(ok bool) {
	if f == nil {
		return
	}
	f.stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished = true
	if f.timer != nil {
		f.timer.Stop()
	}
	if ok && (f.stopped || f.cut) {
		_ = f.c.net.SetDeadline(time.Time{})
	}
}

// answer collects the messages of one statement's answer.
type answer struct {
	sentParse  bool // the statement was prepared in the same exchange
	parsed     bool
	oid, atOID uint32 // the types of the value and of a slot's index
	rows       int
	r          result
	decodeErr  error
	pgErr      *pgconn.PgError
}

// send writes s with the lock id id (c.mu held), preceded by its Parse the first
// time on this session, with its arguments in binary.
func (c *lockConn) send(s *stmt, id int64, a *answer) error {
	f := c.conn.PgConn().Frontend()
	if c.prepared&s.bit == 0 {
		f.SendParse(&pgproto3.Parse{Name: s.name, Query: s.sql, ParameterOIDs: s.oids})
		a.sentParse = true
	}
	n := len(s.oids)
	binary.BigEndian.PutUint64(c.idArg[:], uint64(id))
	if n == 3 {
		binary.BigEndian.PutUint32(c.fenceArg[:], c.d.fence)
	}
	params := c.params[:n]
	if s.set {
		ids, _ := c.conn.TypeMap().Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, c.ids, nil) // cannot fail for []int64
		params = append([][]byte{ids}, params[1:]...)
	}
	f.SendBind(&pgproto3.Bind{PreparedStatement: s.name, ParameterFormatCodes: binaryFormat[:n], Parameters: params, ResultFormatCodes: binaryFormat[:1]})
	f.SendDescribe(&pgproto3.Describe{ObjectType: 'P'})
	f.SendExecute(&pgproto3.Execute{})
	f.SendSync(&pgproto3.Sync{})
	return f.Flush()
}

// receive reads the answer into a until the server is ready for the next
// statement (c.mu held). A timeout leaves the rest to be read later; pgconn
// closes the connection on any other failure.
func (c *lockConn) receive(a *answer) error {
	pg := c.conn.PgConn()
	for {
		msg, err := pg.ReceiveMessage(context.Background())
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.ParseComplete:
			a.parsed = true
		case *pgproto3.RowDescription:
			if len(m.Fields) > 0 {
				a.oid = m.Fields[0].DataTypeOID
			}
			if len(m.Fields) > 1 {
				a.atOID = m.Fields[1].DataTypeOID
			}
		case *pgproto3.DataRow:
			a.rows++
			if len(m.Values) > 0 {
				a.r, a.decodeErr = decode(a.oid, m.Values[0])
			}
			if len(m.Values) > 1 && a.decodeErr == nil {
				var at result
				at, a.decodeErr = decode(a.atOID, m.Values[1])
				a.r.at = int(at.v)
			}
		case *pgproto3.ErrorResponse:
			if a.pgErr == nil {
				a.pgErr = pgconn.ErrorResponseToPgError(m)
			}
		case *pgproto3.ReadyForQuery:
			return nil
		}
	}
}

// conclude turns an answer, or the failure to read it, into the statement's
// value (c.mu held). A failed exchange leaves the session in an unknown state:
// the connection is closed, so that broken reports it. A session that already
// has the statement before it was prepared, or no longer has it after, is not
// the one the connection was set up on (a transaction pooler is in between):
// that reads as NULL, nothing done.
func (c *lockConn) conclude(s *stmt, a *answer, err error) (result, error) {
	if err != nil {
		if !c.conn.IsClosed() {
			closeQuickly(c.conn)
		}
		return result{}, err
	}
	if a.parsed {
		c.prepared |= s.bit
	}
	if a.pgErr != nil {
		switch {
		case a.sentParse && !a.parsed && a.pgErr.Code == "42P05", // duplicate_prepared_statement
			!a.sentParse && a.pgErr.Code == "26000": // invalid_sql_statement_name
			return result{null: true}, nil
		}
		return result{}, a.pgErr
	}
	if a.decodeErr != nil {
		return result{}, a.decodeErr
	}
	if a.rows != 1 {
		return result{}, fmt.Errorf("pgadvisory: %s returned %d rows", s.name, a.rows)
	}
	return a.r, nil
}

// trip is one statement for roundTrip: s with id on c; wait, for a statement
// that blocks in the server's lock queue, cancels it there; linger is how long
// a caller whose context ended waits for the answer before it leaves.
type trip struct {
	c      *lockConn
	s      *stmt
	id     int64
	ids    []int64 // a set statement's (see stmt.set)
	wait   *waitAbort
	linger time.Duration
}

// roundTrip runs s with id on c for a caller whose context is ctx, then hands
// the statement's value (or error) to then, and at last calls after, which
// lets go of c. The caller holds c.mu and has checked that c is usable and ctx
// has not ended. A statement that wait is not nil for blocks in the server's
// lock queue: when ctx ends (or Close begins) wait cancels it on the server.
//
// If ctx ends before the answer, the rest (reading the answer, then, after)
// goes on in a goroutine of the driver's; the caller waits linger more for it,
// then returns ctx's error with gaveUp set. then learns from its handoff
// whether the caller will receive its outcome (kit.Handoff.Deliver).
func roundTrip[T any](d *Driver, ctx context.Context, t trip,
	then func(*kit.Handoff[T], result, error) (T, error), after func()) (v T, err error, gaveUp bool) {
	c, s, id, wait, linger := t.c, t.s, t.id, t.wait, t.linger
	c.ids = t.ids
	if !c.prepare {
		// A query mode for a proxy that cannot keep prepared statements:
		// pgx runs the statement, in a goroutine of the driver's whenever
		// the caller may leave before it ends.
		return splitGaveUp(kit.Run(&d.calls, ctx, linger, func(h *kit.Handoff[T]) (T, error) {
			defer after()
			var r result
			var err error
			if wait != nil {
				r, err = c.waitRow(ctx, d.closing, wait, s, id)
			} else {
				r, err = c.exec(ctx, s, id)
			}
			return then(h, r, err)
		}))
	}
	h := &kit.Handoff[T]{}
	grace := d.grace
	if wait != nil {
		grace = 0
	}
	f := c.fly(ctx, grace)
	var stopAbort func() bool
	if wait != nil {
		wait.f = f
		// Close aborts the waits it finds here after it marked closing, and
		// closing is checked after wait is stored: either Close finds it or
		// the wait sees that Close began.
		c.abort.Store(wait)
		if d.closing.Err() != nil {
			c.abort.Store(nil)
			f.end(false)
			v, err = then(h, result{}, errNotSent)
			after()
			return v, err, false
		}
		// One registration, creating no context: the caller's context is
		// new for each call and would make its children map for a derived one.
		stopAbort = context.AfterFunc(ctx, wait.abort)
	}
	a := &answer{}
	readErr := c.send(s, id, a)
	if readErr == nil {
		readErr = c.receive(a)
	}
	finish := func(err error) (T, error) {
		if wait != nil {
			close(wait.returned)
			stopAbort()
			wait.abort() // returns at once, or once an abort under way has finished
			c.abort.Store(nil)
		}
		f.end(err == nil)
		r, err := c.conclude(s, a, err)
		v, err := then(h, r, err)
		after()
		return v, err
	}
	if !f.interrupted(readErr) {
		v, err = finish(readErr)
		return v, err, false
	}
	// The caller's context ended with the answer still to come: the rest
	// goes on in a goroutine of the driver's (in the caller's once Close has
	// begun, which cuts the socket, so that the rest ends at once).
	return splitGaveUp(h.Continue(&d.calls, ctx, linger, func() (T, error) {
		err := readErr
		if f.resume() {
			err = c.receive(a)
		}
		return finish(err)
	}))
}

// splitGaveUp turns kit's *kit.GaveUpError into ctx's error with gaveUp set, as
// roundTrip's callers take it.
func splitGaveUp[T any](v T, err error) (T, error, bool) {
	var g *kit.GaveUpError
	if errors.As(err, &g) {
		return v, g.Err, true
	}
	return v, err, false
}

// errNotSent is roundTrip's error for a wait not sent because Close came first.
var errNotSent = errors.New("pgadvisory: wait not sent: the driver is closing")
