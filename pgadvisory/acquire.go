package pgadvisory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// TryAcquire makes one attempt (pg_try_advisory_lock) on a connection shared
// with other locks, and draws the fencing token in the same statement. It
// returns driver.ErrLocked if another owner holds the key, here or elsewhere, and
// the same grant again if req.Owner already holds it.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	ctx, done := d.attempt(ctx)
	g, err := d.tryAcquire(ctx, req)
	return g, done(err)
}

func (d *Driver) tryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if g, ok, err := d.heldBy(req); ok || err != nil {
		return g, err
	}
	st, err := d.statements(ctx)
	if err != nil {
		return driver.Grant{}, classify(ctx, err)
	}
	var g driver.Grant
	if req.Permits >= 2 {
		g, err = d.acquirePermit(ctx, req, st, false)
	} else {
		g, err = d.try(ctx, req, st, d.lockID(req.Key), nil)
	}
	g, err = d.recorded(ctx, req, g, err)
	return g, classify(ctx, err)
}

// TryAcquireSet implements driver.SetAcquirer: every key is tried in one
// statement (trySetSQL) on one connection that holds none of them, which
// keeps the locks only if it took them all. The server applies its queue
// rule to each try as to TryAcquire's (a shared request does not pass a
// waiting exclusive one), and keys another owner here holds are refused
// before the statement, as by TryAcquire. The set shares one fencing
// token, drawn once every lock is held. Permits (a slot to find per key),
// a set of mixed shapes, a key already held by its request's owner and two
// keys on one lock id are driver.ErrUnsupported: one by one handles them.
func (d *Driver) TryAcquireSet(ctx context.Context, reqs []*driver.Request) (gs []driver.Grant, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := driver.CheckSet("pgadvisory", reqs); err != nil {
		return nil, err
	}
	ctx, done := d.attempt(ctx)
	defer func() { err = done(classify(ctx, err)) }()
	ids := make([]int64, len(reqs))
	for i, req := range reqs {
		if _, ok, err := d.heldBy(req); ok || err != nil || req.Permits >= 2 || req.Shared != reqs[0].Shared {
			return nil, cmp.Or(err, errSetUnsupported)
		}
		ids[i] = d.lockID(req.Key)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) < len(ids) {
		return nil, errSetUnsupported
	}
	st, err := d.statements(ctx)
	if err != nil {
		return nil, err
	}
	g, err := d.tryAll(ctx, tryCall{reqs: reqs, ids: ids, s: st.setFor(reqs[0].Shared)})
	gs = make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		if gs[i], err = d.recorded(ctx, req, g, err); err != nil {
			return nil, err
		}
	}
	return gs, nil
}

// errSetUnsupported is TryAcquireSet's driver.ErrUnsupported.
var errSetUnsupported = fmt.Errorf("%w: pgadvisory: these requests are taken one at a time", driver.ErrUnsupported)

// try makes one attempt at id on a connection shared with other locks. When
// ctx ends before the answer, try returns ctx's error soon after (settleWait at
// most), and a lock granted after that is given back (see roundTrip). With a
// claim (see register), a lock granted after another attempt for the same
// request claimed it is given back too (see giveBackPermit), and try returns
// errClaimed.
func (d *Driver) try(ctx context.Context, req *driver.Request, st *lockStatements, id int64, claim *atomic.Bool) (driver.Grant, error) {
	return d.tryAll(ctx, tryCall{reqs: []*driver.Request{req}, ids: []int64{id}, s: st.tryFor(req.Shared), claim: claim})
}

// tryCall is one attempt of tryAll: the ids of reqs (one each, all of one
// shape), tried with s (a set's statement for more than one), and register's
// claim.
type tryCall struct {
	reqs  []*driver.Request
	ids   []int64
	s     *stmt
	claim *atomic.Bool
}

// tryAll makes one attempt at every id of t in one statement on one
// connection shared with other locks, as try does for one; the grant is
// every request's.
func (d *Driver) tryAll(ctx context.Context, t tryCall) (driver.Grant, error) {
	for {
		c, err := d.connForTry(ctx, t.reqs[0].Shared, t.ids...)
		if err != nil {
			return driver.Grant{}, err
		}
		g, again, err := d.tryOn(ctx, c, t)
		if !again {
			return g, err
		}
	}
}

// tryOn tries to take t's ids on c, and lets go of c. again reports that c
// turned out unusable for them and another connection should be picked.
func (d *Driver) tryOn(ctx context.Context, c *lockConn, t tryCall) (g driver.Grant, again bool, err error) {
	shared := t.reqs[0].Shared
	if err := c.mu.LockContext(ctx); err != nil {
		d.letGo(c)
		return driver.Grant{}, false, err
	}
	done := func() {
		c.unlock()
		d.letGo(c)
	}
	d.mu.Lock()
	if c.dead.Load() || c.conn == nil {
		d.mu.Unlock()
		done()
		return driver.Grant{}, true, nil
	}
	for _, id := range t.ids {
		if h := c.locks[id]; h != nil {
			// Taken on c by another owner since c was picked. The session
			// would grant it again (session locks count), so never ask it.
			d.mu.Unlock()
			done()
			if !h.shared || !shared {
				return driver.Grant{}, false, errHeldHere
			}
			return driver.Grant{}, true, nil
		}
	}
	d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		done()
		return driver.Grant{}, false, err
	}

	start := time.Now()
	g, err, _ = roundTrip(d, ctx, trip{c: c, s: t.s, id: t.ids[0], ids: t.ids, linger: settleWait},
		func(hand *kit.Handoff[driver.Grant], tok result, err error) (driver.Grant, error) {
			switch {
			case err != nil:
				return driver.Grant{}, d.failed(ctx, c, t.ids, shared, err)
			case tok.null:
				cause := d.pooled(c, 0)
				d.kill(c, cause)
				return driver.Grant{}, cause
			case tok.v == 0:
				return driver.Grant{}, driver.ErrLocked
			}
			ids := t.ids
			if t.s.slots {
				ids = t.ids[tok.at : tok.at+1] // the one slot taken
			}
			if !hand.Deliver() {
				// The caller stopped waiting and will never know of this lock.
				d.giveBack(c, ids, shared)
				return driver.Grant{}, ctx.Err()
			}
			var g driver.Grant
			for i, req := range t.reqs {
				if g, err = d.register(c, req, ids[i], driver.Grant{Token: uint64(tok.v), Start: start}, t.claim); err == errClaimed {
					d.giveBackPermit(c, ids[i])
				}
				if err != nil {
					break
				}
			}
			return g, err
		}, done)
	return g, false, err
}

// failed handles an error of a lock statement for ids on c (c.mu held): a broken
// session is given up; on a live one the statement may have taken the locks before
// failing (in nextval, say), so they are given back. c held no lock on them
// before, so the unlock cannot drop anyone else's.
func (d *Driver) failed(ctx context.Context, c *lockConn, ids []int64, shared bool, err error) error {
	if c.broken(err) {
		cause := errSessionLost(err)
		d.kill(c, cause)
		return cause
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err // not sent
	}
	d.giveBack(c, ids, shared)
	if fenceGone(err) {
		return d.errFenceGone(err)
	}
	return fmt.Errorf("pgadvisory: lock statement: %w", err)
}

// giveBack unlocks ids on c (c.mu held), which c held for no one before the
// statement that may have taken them, so the unlock cannot drop anyone else's
// lock. If that fails, c is given up: its session may hold a lock nobody knows.
func (d *Driver) giveBack(c *lockConn, ids []int64, shared bool) {
	uctx, cancel := context.WithTimeout(context.Background(), stmtGrace)
	defer cancel()
	for _, id := range ids {
		if ok, uerr := c.exec(uctx, unlockFor(shared), id); uerr != nil || ok.null {
			d.kill(c, errSessionLost(fmt.Errorf("undoing a lock statement: %v", uerr)))
			return
		}
	}
}

// giveBackPermit is giveBack for a permit's slot taken by an attempt that
// lost its claim (see register): the unlock announces the slot if it is left
// free, as a release does, so that the waiters of other slots hear of it
// rather than find it at their next rescan.
func (d *Driver) giveBackPermit(c *lockConn, id int64) {
	uctx, cancel := context.WithTimeout(context.Background(), stmtGrace)
	defer cancel()
	ok, uerr := c.exec(uctx, unlockPermitStmt, id)
	if uerr != nil && !c.broken(uerr) {
		// As in a release: the announcement can fail at commit, after the
		// unlock; a plain unlock settles it (false: already freed).
		ok, uerr = c.exec(uctx, unlockStmt, id)
	}
	if uerr != nil || ok.null {
		// The session may hold a slot for no one: give it up.
		d.kill(c, errSessionLost(fmt.Errorf("giving back a permit granted twice: %v", uerr)))
	}
}

// Acquire blocks until req.Owner holds req.Key. It waits in PostgreSQL's own lock
// queue (pg_advisory_lock) on a connection of its own, so it is granted the lock
// by the server, in arrival order, within a round trip of the release. When ctx
// ends the wait is cancelled with a cancel request and the connection cleared
// before Acquire returns ctx.Err(): a lock granted as the wait ended is not left
// behind; against a server that does not answer the cancel, Acquire returns
// when ctx ends and the driver ends the wait in the background. When no
// connection may wait (max_lock_conns-1 already do), it makes
// one attempt without a queue place and returns driver.ErrLocked if the key is
// held: the portable layer tries again after its backoff.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, req)
	g, err = d.recorded(ctx, req, g, err)
	return g, classify(ctx, err)
}

func (d *Driver) acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	if g, ok, err := d.heldBy(req); ok || err != nil {
		return g, err
	}
	st, err := d.statements(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	if req.Permits >= 2 {
		return d.acquirePermit(ctx, req, st, true)
	}
	id := d.lockID(req.Key)
	// A key found held a moment ago is waited for at once; any other is first
	// tried on a connection shared with other locks, so that a burst of
	// acquires of free keys does not open a connection per caller.
	tried := false
	if !d.contended(id) {
		g, err := d.try(ctx, req, st, id, nil)
		if !errors.Is(err, driver.ErrLocked) {
			return g, err
		}
		d.markContended(id)
		tried = true
	}
	w, err := d.connForWait(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	if w != nil {
		return d.wait(ctx, w, req, st.waitFor(req.Shared), []int64{id}, nil)
	}
	// Every connection the cap allows is taken, and at least one must stay
	// free of waits (a holder may need one more lock).
	if !tried {
		g, err := d.try(ctx, req, st, id, nil)
		if !errors.Is(err, driver.ErrLocked) {
			return g, err
		}
	}
	return driver.Grant{}, errNoWaitConn
}

// errNoWaitConn is driver.ErrLocked from an Acquire that found the key held
// and no connection to wait on.
var errNoWaitConn = fmt.Errorf("%w (and every lock connection the driver may open is in use, so the wait is not queued on the server)", driver.ErrLocked)

// contendedFor is how long a key found held is waited for without a try first.
const contendedFor = time.Second

// contendedSlots bounds the memory of contended keys: a lossy table, so a
// forgotten key costs one extra try, never correctness.
const contendedSlots = 64

type contention struct {
	id int64
	at time.Time
}

func (d *Driver) contended(id int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.recent[uint64(id)%contendedSlots]
	return c.id == id && time.Since(c.at) < contendedFor
}

func (d *Driver) markContended(id int64) {
	d.mu.Lock()
	d.recent[uint64(id)%contendedSlots] = contention{id, time.Now()}
	d.mu.Unlock()
}

// wait takes ids[0] with s on w, a connection picked to wait on, blocking in
// the server's lock queue; or, with a statement on a semaphore's slots
// (stmt.slots), the first free one of ids, waiting for ids[0] if none is. When ctx ends the wait is cancelled on the server and w cleared;
// if the server has not done so settleWait later, wait returns and the driver
// finishes in the background (see roundTrip). With a claim (see register), a
// lock granted after another attempt for the same request claimed it is
// given back (see giveBackPermit), and wait returns errClaimed.
func (d *Driver) wait(ctx context.Context, w *lockConn, req *driver.Request, s *stmt, ids []int64, claim *atomic.Bool) (driver.Grant, error) {
	if err := w.mu.LockContext(ctx); err != nil {
		d.letGo(w)
		return driver.Grant{}, d.waitEnded(ctx)
	}
	done := func() {
		w.unlock()
		d.letGo(w)
	}
	if err := w.usable(); err != nil {
		done()
		return driver.Grant{}, err
	}
	if ctx.Err() != nil {
		done()
		return driver.Grant{}, d.waitEnded(ctx)
	}
	start := time.Now()
	a := &waitAbort{c: w, returned: make(chan struct{})}
	t := trip{c: w, s: s, id: ids[0], wait: a, linger: settleWait}
	tried := false // taken by the statement's try, not granted by the queue
	if s.set {
		t.ids = ids
	}
	g, err, gaveUp := roundTrip(d, ctx, t,
		func(hand *kit.Handoff[driver.Grant], tok result, err error) (driver.Grant, error) {
			if err == errNotSent {
				return driver.Grant{}, d.waitEnded(ctx)
			}
			id := ids[0]
			if s.slots && err == nil && !tok.null && tok.at >= 0 {
				id, tried = ids[tok.at], true
			}
			return d.waited(ctx, hand, waitedCall{w: w, req: req, id: id, start: start, claim: claim}, tok, err)
		}, done)
	if gaveUp {
		return driver.Grant{}, d.waitEnded(ctx)
	}
	if err == nil && !tried {
		// The server's lock queue granted it: its own notification (counted
		// even when the queue was empty by the time the statement arrived).
		driver.Woke(ctx, driver.WakeNotified)
	}
	return g, err
}

// waitedCall is the wait whose answer waited acts on: req's id waited for on
// w from start, with register's claim.
type waitedCall struct {
	w     *lockConn
	req   *driver.Request
	id    int64
	start time.Time
	claim *atomic.Bool
}

// waited acts on the answer to a wait on c.w (c.w.mu held).
func (d *Driver) waited(ctx context.Context, hand *kit.Handoff[driver.Grant], c waitedCall, tok result, err error) (driver.Grant, error) {
	w, req, id, start, claim := c.w, c.req, c.id, c.start, c.claim
	received := time.Now()
	ended := ctx.Err() != nil || d.closing.Err() != nil
	if err == nil && !tok.null && !ended {
		if hand.Deliver() {
			// The server granted the lock at most about one round trip before
			// the answer arrived; the validity of the lock counts from then.
			granted := received.Add(-w.rtt)
			if granted.Before(start) {
				granted = start
			}
			g, err := d.register(w, req, id, driver.Grant{Token: uint64(tok.v), Start: granted}, claim)
			if err != errClaimed {
				return g, err
			}
			// Another attempt for this request holds a permit already.
			d.giveBackPermit(w, id)
			return driver.Grant{}, errClaimed
		}
		ended = true // the caller stopped waiting: give the lock back below
	}
	if err == nil && tok.null {
		cause := d.pooled(w, 0)
		d.kill(w, cause)
		return driver.Grant{}, cause
	}
	switch {
	case w.broken(err):
		cause := errSessionLost(err)
		d.kill(w, cause)
		err = cause
	default:
		// Cancelled, or failed on a live session: the lock may have been
		// granted as the wait ended. w holds nothing else, so clear it all.
		if cerr := w.clear(); cerr != nil {
			d.kill(w, errSessionLost(cerr))
		}
	}
	if ended {
		return driver.Grant{}, d.waitEnded(ctx)
	}
	if fenceGone(err) {
		return driver.Grant{}, d.errFenceGone(err)
	}
	return driver.Grant{}, fmt.Errorf("pgadvisory: wait for lock: %w", err)
}

// waitEnded is the error of a wait ended by ctx or by Close.
func (d *Driver) waitEnded(ctx context.Context) error {
	if d.closing.Err() != nil {
		return errClosed
	}
	return ctx.Err()
}

// waitRow runs a blocking lock statement on c (c.mu held) in a query mode the
// connection string chose, and returns its value (NULL for the wrong session).
// When ctx ends, or Close begins, a ends the statement early.
func (c *lockConn) waitRow(ctx, closing context.Context, a *waitAbort, s *stmt, id int64) (result, error) {
	// Close aborts the waits it finds here after it marked closing, and
	// closing is checked after a is stored: either Close finds a or a sees
	// that Close began.
	c.abort.Store(a)
	defer c.abort.Store(nil)
	if closing.Err() != nil {
		return result{}, errNotSent
	}
	stop := context.AfterFunc(ctx, a.abort)
	r, err := c.run(s, id)
	close(a.returned)
	stop()
	a.abort() // returns at once, or once an abort under way has finished
	if a.cut && err == nil && !c.conn.IsClosed() {
		// A cut that came just after the answer: the session is fine.
		_ = c.net.SetDeadline(time.Time{})
	}
	return r, err
}

// waitAbort ends a blocking lock statement early: it sends the server a cancel
// request, again if the statement does not end soon after (a cancel that
// overtook the statement is ignored by the server), and at last cuts the
// socket. Its first call does that; later ones wait for the first to finish.
type waitAbort struct {
	c        *lockConn
	f        *flight // the statement's flight, if it has one; set before the abort can run
	once     sync.Once
	returned chan struct{} // closed when the statement returned
	cut      bool          // the socket was cut
}

func (a *waitAbort) abort() { a.once.Do(a.cancel) }

func (a *waitAbort) cancel() {
	for i := 0; i < cancelAttempts; i++ {
		select {
		case <-a.returned:
			return
		default:
		}
		cctx, cancel := context.WithTimeout(context.Background(), cancelWait)
		err := a.c.conn.PgConn().CancelRequest(cctx)
		// pgx does not say whether the server acknowledged the request (it
		// closes the connection once it has read it); a request that took
		// all its time was not, and the server is not answering.
		unanswered := cctx.Err() != nil
		cancel()
		if err != nil || unanswered {
			break
		}
		t := time.NewTimer(cancelWait)
		select {
		case <-a.returned:
			t.Stop()
			return
		case <-t.C:
		}
	}
	// The session does not answer: give it up.
	a.cut = true
	if a.f != nil {
		a.f.cutNow() // and the read is not resumed
	} else {
		_ = a.c.net.SetDeadline(time.Unix(1, 0))
	}
}

// clear releases every advisory lock of a waiting session (c.mu held), retrying
// if a late cancel request interrupts it.
func (c *lockConn) clear() error {
	var err error
	for i := 0; i < cancelAttempts; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), stmtGrace)
		_, err = c.exec(ctx, unlockAllStmt, 0)
		cancel()
		if err == nil || c.broken(err) {
			return err
		}
	}
	return err
}
