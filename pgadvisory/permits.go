package pgadvisory

// Semaphores: a semaphore of n permits is n advisory locks, its slots, each
// taken exclusively by one permit holder (see Read-write locks and semaphores
// in the package documentation). A permit is held, refreshed and released
// exactly as a mutex is, on its slot's id; only the choice of the id differs.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// PermitID returns the advisory lock id of slot i (0 <= i < n) of the
// semaphore key under prefix: the first 8 bytes of the SHA-256 of the UTF-8
// bytes of prefix, a newline, key, the byte 0xff and i in decimal, read as a
// big-endian two's complement integer. The 0xff byte never occurs in UTF-8, so
// no slot id is the LockID of any key (except by a 64-bit SHA-256 collision).
// PostgreSQL 11 and later compute the same value with
//
//	('x' || encode(substring(sha256(convert_to(prefix || chr(10) || key, 'UTF8') || '\xff'::bytea || convert_to(i::text, 'UTF8')) for 8), 'hex'))::bit(64)::bigint
func PermitID(prefix, key string, i int) int64 {
	h := sha256.New()
	h.Write([]byte(prefix))
	h.Write([]byte{'\n'})
	h.Write([]byte(key))
	h.Write([]byte{0xff})
	h.Write([]byte(strconv.Itoa(i)))
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]))
}

// permitRescan is how long a waiting permit request stays queued on one slot
// before it cancels that wait and tries every slot again, while the Driver's
// listening session (see listen.go) is not in force: a permit given back on
// another slot is found within it.
const permitRescan = 100 * time.Millisecond

// permitUse counts the permit holders of one semaphore key in this Driver and
// the number of permits they gave.
type permitUse struct{ n, holders int }

// shapeMismatch returns driver.ErrInvalidArgument when req uses its key in
// another shape than the holders of that key in this Driver: permits of
// another n, or permits on a key held as a lock, or a lock on a semaphore.
func (d *Driver) shapeMismatchLocked(req *driver.Request) error {
	u, ok := d.perms[req.Key]
	switch {
	case req.Permits >= 2 && ok && u.n != req.Permits:
		return fmt.Errorf("%w: pgadvisory: %d permits asked on a semaphore held here with %d", driver.ErrInvalidArgument, req.Permits, u.n)
	case req.Permits >= 2 && d.ids[d.lockID(req.Key)].n > 0:
		return fmt.Errorf("%w: pgadvisory: permits asked on a key held here as a lock", driver.ErrInvalidArgument)
	case req.Permits < 2 && ok:
		return fmt.Errorf("%w: pgadvisory: a lock asked on a key held here as a semaphore of %d permits", driver.ErrInvalidArgument, u.n)
	}
	return nil
}

// bookPermitLocked counts h, just registered or unbooked (delta 1 or -1), in
// d.perms; d.mu is held.
func (d *Driver) bookPermitLocked(h *holding, delta int) {
	if h.permits < 2 {
		return
	}
	u := d.perms[h.k.key]
	u.n = h.permits
	u.holders += delta
	if u.holders <= 0 {
		delete(d.perms, h.k.key)
	} else {
		d.perms[h.k.key] = u
	}
}

// acquirePermit takes one of the req.Permits slots of req.Key. One statement
// tries them all (trySlotsSQL), from a slot that turns with every call so
// that concurrent requests spread, and takes the first free one. If all are
// held it returns driver.ErrLocked (TryAcquire), or waits (Acquire): one
// statement on a connection of its own tries them all again and, all held,
// waits in the server's queue of the first, for at most permitRescan each
// time before trying them all again. A semaphore found full within the last
// contendedFor is waited for at once, without the try on a shared
// connection first.
func (d *Driver) acquirePermit(ctx context.Context, req *driver.Request, st *lockStatements, wait bool) (driver.Grant, error) {
	n := req.Permits
	for {
		first := int(uint64(d.permitTurn.Add(1)) % uint64(n))
		slots := make([]int64, n)
		for j := range slots {
			slots[j] = d.permitID(req.Key, (first+j)%n)
		}
		var bell *permitBell
		listening := false
		if wait {
			// Interest in the other slots is registered before they are
			// tried, so that a permit given back after its slot was found
			// held is announced to this request.
			bell, listening = d.permitBellFor(slots[1:])
		}
		g, err, again := d.permitRound(ctx, req, st, slots, bell, listening)
		if bell != nil {
			d.unring(bell)
		}
		if !again {
			return g, err
		}
	}
}

// trySlots makes one attempt at the slots of a semaphore not held by another
// owner in this process, in one statement that takes at most one of them.
func (d *Driver) trySlots(ctx context.Context, req *driver.Request, st *lockStatements, slots []int64, claim *atomic.Bool) (driver.Grant, error) {
	for {
		d.mu.Lock()
		free := slices.DeleteFunc(slices.Clone(slots), func(id int64) bool { return d.conflicts(id, false) })
		d.mu.Unlock()
		if len(free) == 0 {
			return driver.Grant{}, errHeldHere
		}
		g, err := d.tryAll(ctx, tryCall{reqs: []*driver.Request{req}, ids: free, s: st.slots, claim: claim})
		if err != errHeldHere {
			return g, err // else one was taken here since: look again
		}
	}
}

// permitRound tries every slot, first slots[0], and waits on slots[0] if bell
// is not nil; again reports that the wait ended for a rescan.
//
// While it waits in the server's queue of slots[0], a slot announced free
// (by the release that left it free, see unlockPermitSQL) is tried at once,
// with every other slot, in one statement on another connection, the wait
// staying queued: only if that try takes a slot is the wait cancelled (a
// cancel request costs the server a process start). The two attempts share
// a claim, so that if the wait is granted too, just before its cancel, one
// of the two grants is given back.
func (d *Driver) permitRound(ctx context.Context, req *driver.Request, st *lockStatements, slots []int64, bell *permitBell, listening bool) (g driver.Grant, err error, again bool) {
	sem := d.permitID(req.Key, 0)
	due := d.shapeCheckDue(req)
	tried := bell == nil || due || !d.contended(sem)
	if tried {
		g, err := d.trySlots(ctx, req, st, slots, nil)
		if !errors.Is(err, driver.ErrLocked) {
			return g, err, false
		}
		if due {
			// All n are held: a moment to look for users of the key in
			// another shape, without cost while permits are free, and at
			// most once a second while none is found.
			if err := d.checkShape(ctx, req, st); err != nil {
				return driver.Grant{}, err, false
			}
			d.shapeCheckClean(req)
		}
		if bell == nil {
			return driver.Grant{}, driver.ErrLocked, false
		}
		d.markContended(sem)
	}
	w, err := d.connForWait(ctx)
	if err != nil {
		return driver.Grant{}, err, false
	}
	if w == nil {
		if !tried {
			if g, err := d.trySlots(ctx, req, st, slots, nil); !errors.Is(err, driver.ErrLocked) {
				return g, err, false
			}
		}
		return driver.Grant{}, errNoWaitConn, false
	}
	rescan := d.rescan[0]
	if listening {
		rescan = d.rescan[1]
	}
	wctx, cancel := context.WithTimeout(ctx, rescan)
	defer cancel()
	type outcome struct {
		g   driver.Grant
		err error
	}
	claim := new(atomic.Bool)
	waited := make(chan outcome, 1)
	go func() {
		g, err := d.wait(wctx, w, req, st.waitSlots, slots, claim)
		if err != nil && err != errClaimed && wctx.Err() != nil && ctx.Err() == nil && d.closing.Err() == nil {
			err = errRescan
		}
		waited <- outcome{g, err}
	}()
	var o outcome
wait:
	for {
		select {
		case o = <-waited:
			break wait
		case <-bell.ch:
			// Announcements stopped (the listening session ended): rescan.
			cancel()
			o = <-waited
			if o.err == errRescan {
				driver.Woke(ctx, driver.WakeNotified)
				return driver.Grant{}, nil, true
			}
			break wait
		case <-bell.freed:
			g, err := d.trySlots(ctx, req, st, slots[1:], claim)
			if errors.Is(err, driver.ErrLocked) {
				continue // taken by someone else first: stay queued
			}
			driver.Woke(ctx, driver.WakeNotified)
			cancel()
			o = <-waited
			if err == nil {
				// The wait was cancelled, or granted after the try and
				// given back (errClaimed).
				return g, nil, false
			}
			if o.err == nil {
				return o.g, nil, false // granted before the try, which gave its slot back
			}
			if err == errClaimed {
				err = o.err
			}
			if ctx.Err() != nil {
				return driver.Grant{}, d.waitEnded(ctx), false
			}
			return driver.Grant{}, err, false
		}
	}
	switch {
	case o.err == errRescan:
		// The rescan timer: try every slot again, for a free that was not
		// announced.
		driver.Woke(ctx, driver.WakeTimer)
		return driver.Grant{}, nil, true
	case o.err != nil && ctx.Err() != nil:
		return driver.Grant{}, d.waitEnded(ctx), false
	}
	return o.g, o.err, false
}

// errClaimed is the outcome of an attempt of a permit request whose other
// attempt was granted first (see register): its own grant was given back.
var errClaimed = errors.New("pgadvisory: permit granted to another attempt of the same request")

// errRescan marks a permit wait ended to try every slot again.
var errRescan = errors.New("pgadvisory: permit wait ended to try every slot again")

// shapeCheckEvery is how often a Driver looks in pg_locks for another shape
// of a key whose permits it finds all held (see checkShape): a caller that
// polls a full semaphore with TryAcquire does not read pg_locks every time.
const shapeCheckEvery = time.Second

// shapeCheckDue reports whether req's key is due for a shape check: it was
// not found clean by this Driver within the last shapeCheckEvery. The table
// is lossy, like the contended keys': a forgotten key costs an extra check.
func (d *Driver) shapeCheckDue(req *driver.Request) bool {
	id := d.permitID(req.Key, 0)
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.shapeChecked[uint64(id)%contendedSlots]
	return c.id != id || time.Since(c.at) >= shapeCheckEvery
}

// shapeCheckClean records that req's key was just found used in no other
// shape. A mismatch found is not recorded, so the next request looks again.
func (d *Driver) shapeCheckClean(req *driver.Request) {
	id := d.permitID(req.Key, 0)
	d.mu.Lock()
	d.shapeChecked[uint64(id)%contendedSlots] = contention{id, time.Now()}
	d.mu.Unlock()
}

// checkShape looks on the server, when every permit of req's semaphore is
// held, for the key's lock id and for slot req.Permits (one beyond the last)
// being held or awaited by anyone: the key in use as a lock, or as a
// semaphore of more permits. Either is driver.ErrInvalidArgument.
func (d *Driver) checkShape(ctx context.Context, req *driver.Request, st *lockStatements) error {
	for _, c := range []struct {
		id   int64
		what string
	}{
		{d.permitID(req.Key, req.Permits), fmt.Sprintf("as a semaphore of more than %d permits", req.Permits)},
		{d.lockID(req.Key), "as a lock"},
	} {
		used, err := d.inUse(ctx, c.id)
		if err != nil {
			return err
		}
		if used {
			return fmt.Errorf("%w: pgadvisory: every one of the %d permits asked is held, and another client uses the key %s", driver.ErrInvalidArgument, req.Permits, c.what)
		}
	}
	return nil
}

// inUse reports whether any session of the database holds or awaits the
// advisory lock id (pg_locks).
func (d *Driver) inUse(ctx context.Context, id int64) (bool, error) {
	for {
		c, err := d.connForTry(ctx, true, id)
		if errors.Is(err, driver.ErrLocked) {
			return true, nil // held here, exclusively
		}
		if err != nil {
			return false, err
		}
		if err := c.mu.LockContext(ctx); err != nil {
			d.letGo(c)
			return false, err
		}
		done := func() {
			c.unlock()
			d.letGo(c)
		}
		if c.dead.Load() || c.conn == nil {
			done()
			continue
		}
		used, err, _ := roundTrip(d, ctx, trip{c: c, s: inUseStmt, id: id, linger: settleWait},
			func(_ *kit.Handoff[bool], r result, err error) (bool, error) {
				if err != nil {
					if c.broken(err) {
						cause := errSessionLost(err)
						d.kill(c, cause)
						return false, cause
					}
					return false, fmt.Errorf("pgadvisory: reading pg_locks: %w", err)
				}
				return r.v != 0, nil
			}, done)
		return used, err
	}
}
