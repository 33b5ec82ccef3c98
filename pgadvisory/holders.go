package pgadvisory

// The holders table (holders=true): an advisory lock stores nothing but its
// id, so who holds it, with what label and token, is written beside it, in an
// UNLOGGED table with one row per hold, keyed by (lock_id, pid). A row is
// trusted only while pg_locks shows that pid holding that id (Inspect and List
// join the two), so a row left behind by a session that ended is never
// reported, and a restart (which ends every session) also empties the table
// (an unlogged table is truncated by crash recovery). See "Inspection,
// eviction and leader election" in the package documentation.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/lock/driver"
)

// evictChannel is the LISTEN/NOTIFY channel of evictions: the payload is
// "<lock id> <pid>", the hold ForceRelease asks its driver to give up.
const evictChannel = "distlock_evict"

// evictBound is how long ForceRelease waits for evicted holders' drivers to
// give their holds up before it ends their sessions (pg_terminate_backend).
const evictBound = 3 * time.Second

// permitProbe is how many semaphore slots Inspect looks at beyond those a
// holders row names: the number of permits is not recorded on the server.
const permitProbe = 64

// createHoldersSQL creates the holders table.
const createHoldersSQL = `CREATE UNLOGGED TABLE IF NOT EXISTS %s (
	lock_id bigint NOT NULL, pid integer NOT NULL, key bytea NOT NULL, owner bytea NOT NULL, label bytea NOT NULL,
	token bigint NOT NULL, shared boolean NOT NULL, permits integer NOT NULL,
	since timestamptz NOT NULL DEFAULT clock_timestamp(), evicted timestamptz,
	PRIMARY KEY (lock_id, pid))`

// holdersName is the holders table's name in SQL syntax.
func (d *Driver) holdersName() string {
	return pgx.Identifier{d.o.prefix + "_holders"}.Sanitize()
}

// errNoHolders is the reason for operations that need the holders table.
func errNoHolders(what string) error {
	return fmt.Errorf("%w: pgadvisory: %s needs the holders table (holders=true, WithHolders): an advisory lock records no owner, label or key", driver.ErrUnsupported, what)
}

// auxMax is how many auxiliary connections a Driver opens at most.
const auxMax = 4

// auxConns are the Driver's connections for everything but lock statements:
// holders rows, Inspect, List, ForceRelease. Opened on demand, up to auxMax,
// and kept until Close.
type auxConns struct {
	slots chan struct{} // one token per connection in use
	mu    sync.Mutex
	idle  []*pgx.Conn
	done  bool        // closed by Close: connections given back are closed
	ready atomic.Bool // the holders table is known to exist
}

func newAuxConns() auxConns { return auxConns{slots: make(chan struct{}, auxMax)} }

// withAux runs f on an auxiliary connection, within ctx and the Driver's life.
func (d *Driver) withAux(ctx context.Context, f func(ctx context.Context, conn *pgx.Conn) error) error {
	if d.closing.Err() != nil {
		return errClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.closing, cancel)
	defer stop()
	a := &d.aux
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return closedOr(d, ctx.Err())
	}
	defer func() { <-a.slots }()
	var conn *pgx.Conn
	a.mu.Lock()
	if n := len(a.idle); n > 0 {
		conn, a.idle = a.idle[n-1], a.idle[:n-1]
	}
	a.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = d.connect(ctx); err != nil {
			return closedOr(d, err)
		}
		if _, err := conn.Exec(ctx, "SELECT set_config('application_name', $1, false)", d.tag); err != nil {
			closeQuickly(conn)
			return closedOr(d, err)
		}
	}
	err := func() error {
		if d.o.holders && !a.ready.Load() {
			if err := d.ensureHolders(ctx, conn); err != nil {
				return err
			}
			a.ready.Store(true)
		}
		return f(ctx, conn)
	}()
	if conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		closeQuickly(conn)
	} else {
		a.mu.Lock()
		if a.done {
			a.mu.Unlock()
			closeQuickly(conn)
		} else {
			a.idle = append(a.idle, conn)
			a.mu.Unlock()
		}
	}
	return closedOr(d, err)
}

// closedOr is errClosed for a failure caused by Close, else err.
func closedOr(d *Driver, err error) error {
	if err != nil && d.closing.Err() != nil {
		return errClosed
	}
	return err
}

// closeAux closes the auxiliary connections (at Close; those in use are
// closed as they are given back, at once since Close ended their contexts).
func (d *Driver) closeAux() {
	d.aux.mu.Lock()
	idle := d.aux.idle
	d.aux.idle, d.aux.done = nil, true
	d.aux.mu.Unlock()
	for _, c := range idle {
		closeQuickly(c)
	}
}

// ensureHolders finds the holders table, creating it if missing.
func (d *Driver) ensureHolders(ctx context.Context, conn *pgx.Conn) error {
	name := d.holdersName()
	var oid *uint32
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1)::oid`, name).Scan(&oid); err != nil {
		return fmt.Errorf("pgadvisory: looking up the holders table %s: %w", name, err)
	}
	if oid != nil {
		return nil
	}
	_, err := conn.Exec(ctx, fmt.Sprintf(createHoldersSQL, name))
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "23505"):
		return nil // created by another client at the same moment
	case err != nil:
		create := strings.Join(strings.Fields(fmt.Sprintf(createHoldersSQL, name)), " ")
		return fmt.Errorf("pgadvisory: cannot create the holders table %s (a user allowed to create it can run once: %s; GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s TO %[3]s; or leave holders off): %[4]w",
			name, create, pgx.Identifier{d.cfg.ConnConfig.User}.Sanitize(), err)
	}
	return nil
}

// holderSQL writes the row of one hold; a row of the same (lock_id, pid) is
// one left by an earlier hold of the session (or of a session whose pid was
// reused), and is replaced, but keeps its since and eviction mark when it is
// the same hold (a relabelling).
const holderSQL = `INSERT INTO %s AS h (lock_id, pid, key, owner, label, token, shared, permits)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (lock_id, pid) DO UPDATE SET key = EXCLUDED.key, owner = EXCLUDED.owner, label = EXCLUDED.label,
	token = EXCLUDED.token, shared = EXCLUDED.shared, permits = EXCLUDED.permits,
	since = CASE WHEN h.owner = EXCLUDED.owner AND h.token = EXCLUDED.token THEN h.since ELSE clock_timestamp() END,
	evicted = CASE WHEN h.owner = EXCLUDED.owner AND h.token = EXCLUDED.token THEN h.evicted END`

// writeHolder stores the row of h with label.
func (d *Driver) writeHolder(ctx context.Context, h *holding, label string) error {
	return d.withAux(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, fmt.Sprintf(holderSQL, d.holdersName()),
			h.id, h.c.pid, []byte(h.k.key), []byte(h.k.owner), []byte(label), int64(h.token), h.shared, h.permits)
		return err
	})
}

// recorded finishes a grant when holders are on: it writes the holder's row,
// and starts the session that hears evictions. A grant whose row cannot be
// written is given back: Inspect would not show it.
func (d *Driver) recorded(ctx context.Context, req *driver.Request, g driver.Grant, err error) (driver.Grant, error) {
	if err != nil || !d.o.holders {
		return g, err
	}
	d.mu.Lock()
	h := d.byOwner[ownerKey{req.Key, req.Owner}]
	if h != nil && h.gone {
		h = nil
	}
	d.startListenerLocked()
	d.mu.Unlock()
	if h == nil {
		return g, nil // lost already: the portable layer hears it through Lost
	}
	if werr := d.writeHolder(ctx, h, req.Label); werr != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stmtGrace)
		_ = d.Release(rctx, req)
		cancel()
		return driver.Grant{}, fmt.Errorf("pgadvisory: recording the holder (the lock was given back): %w", werr)
	}
	return g, nil
}

// dropHolder deletes the row of h after its release (best effort: a row left
// behind is ignored, as its session no longer holds the id, and replaced by
// the next hold of the id on the session).
func (d *Driver) dropHolder(ctx context.Context, h *holding) {
	_ = d.withAux(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE lock_id = $1 AND pid = $2 AND owner = $3 AND token = $4`, d.holdersName()),
			h.id, h.c.pid, []byte(h.k.owner), int64(h.token))
		return err
	})
}

// locksSQL reads the advisory locks held or awaited on the ids $1 in this
// database, with their holders rows where there are any ({join}).
const locksSQL = `SELECT l.id, l.pid, l.mode = 'ShareLock', l.granted,
	coalesce((SELECT a.application_name ~ '(^|\()distlock-[0-9a-f]{12}\)?$' FROM pg_stat_activity a WHERE a.pid = l.pid), false), {cols}
	FROM (SELECT (classid::bigint << 32) | objid::bigint AS id, pid, mode, granted FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) l
	{join}
	WHERE l.id = ANY($1::bigint[])`

func (d *Driver) locksQuery() string {
	if !d.o.holders {
		return strings.NewReplacer("{cols}", "NULL::bytea, NULL::bytea, NULL::bigint, NULL::timestamptz, NULL::integer", "{join}", "").Replace(locksSQL)
	}
	return strings.NewReplacer("{cols}", "h.owner, h.label, h.token, h.since, h.permits",
		"{join}", "LEFT JOIN "+d.holdersName()+" h ON l.granted AND h.lock_id = l.id AND h.pid = l.pid").Replace(locksSQL)
}

// advisoryLock is one row of locksSQL.
type advisoryLock struct {
	id              int64
	pid             int32
	shared, granted bool
	owner, label    []byte
	token           *int64
	since           *time.Time
	permits         *int32
	slot            bool // the id is a semaphore slot's
	labelled        bool // it has a holders row
	driverSession   bool // the holding session is a distlock driver's (by its application_name)
}

// advisoryLocks reads the entries of pg_locks for key: its LockID and its
// semaphore slots.
func (d *Driver) advisoryLocks(ctx context.Context, conn *pgx.Conn, key string) (locks []advisoryLock, permits int, err error) {
	slots := permitProbe
	if d.o.holders {
		var n *int32
		if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT max(permits) FROM %s WHERE key = $1`, d.holdersName()), []byte(key)).Scan(&n); err != nil {
			return nil, 0, err
		}
		if n != nil {
			permits = int(*n)
			slots = max(slots, permits)
		}
	}
	ids := make([]int64, 0, slots+1)
	ids = append(ids, d.lockID(key))
	slotOf := map[int64]bool{}
	for i := range slots {
		id := d.permitID(key, i)
		ids = append(ids, id)
		slotOf[id] = true
	}
	rows, err := conn.Query(ctx, d.locksQuery(), ids)
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var l advisoryLock
		if err := rows.Scan(&l.id, &l.pid, &l.shared, &l.granted, &l.driverSession, &l.owner, &l.label, &l.token, &l.since, &l.permits); err != nil {
			rows.Close()
			return nil, 0, err
		}
		l.slot = slotOf[l.id]
		l.labelled = l.owner != nil
		locks = append(locks, l)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return locks, permits, nil
}

// Inspect implements driver.Inspector from pg_locks (holders, shared or not,
// waiters) and, with holders on, the holders table (owner, label, token,
// since). A holder without a row (an SQL client, a driver without holders)
// is reported with the label "postgres pid <pid>", token 0 and no Since.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.Info, error) {
	var in driver.Info
	err := d.withAux(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		locks, permits, err := d.advisoryLocks(ctx, conn, key)
		if err != nil {
			return err
		}
		in = infoFrom(locks, permits)
		return nil
	})
	if err != nil {
		return driver.Info{}, classify(ctx, err)
	}
	return in, nil
}

func infoFrom(locks []advisoryLock, permits int) driver.Info {
	in := driver.Info{}
	slots := map[int64]bool{}
	for _, l := range locks {
		if l.slot {
			slots[l.id] = true
		}
		if !l.granted {
			in.Waiters++
			continue
		}
		h := driver.Holder{Shared: l.shared && !l.slot}
		if l.labelled {
			h.Owner, h.Label = string(l.owner), string(l.label)
			if l.token != nil {
				h.Token = uint64(*l.token)
			}
			if l.since != nil {
				h.Since = *l.since
			}
			if l.permits != nil {
				permits = max(permits, int(*l.permits))
			}
		} else {
			h.Label = "postgres pid " + strconv.Itoa(int(l.pid))
		}
		in.Token = max(in.Token, h.Token)
		in.Holders = append(in.Holders, h)
	}
	if len(slots) > 0 {
		// Without a row the number of permits is not recorded anywhere: the
		// slots seen in use are the least it can be.
		in.Permits = max(permits, len(slots), 2)
	}
	slices.SortStableFunc(in.Holders, func(a, b driver.Holder) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return in
}

// List implements driver.Lister with the holders table: the keys of rows
// whose session holds their id in pg_locks.
func (d *Driver) List(ctx context.Context, prefix string) ([]string, error) {
	if !d.o.holders {
		return nil, errNoHolders("List")
	}
	var keys []string
	err := d.withAux(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT DISTINCT h.key FROM %s h
			JOIN pg_locks l ON l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
				AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND ((l.classid::bigint << 32) | l.objid::bigint) = h.lock_id AND l.pid = h.pid
			WHERE substring(h.key FROM 1 FOR length($1::bytea)) = $1::bytea`, d.holdersName()), []byte(prefix))
		if err != nil {
			return err
		}
		keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var k []byte
			err := r.Scan(&k)
			return string(k), err
		})
		return err
	})
	if err != nil {
		return nil, classify(ctx, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// Relabel implements driver.Labeler: the row of req.Owner's hold, which this
// Driver must hold, gets label.
func (d *Driver) Relabel(ctx context.Context, req *driver.Request, label string) error {
	if !d.o.holders {
		return errNoHolders("Relabel")
	}
	h, err := d.lookup(req)
	if err != nil {
		return err
	}
	return classify(ctx, d.writeHolder(ctx, h, label))
}

// ForceRelease implements driver.Evictor. Holders with a row (distlock
// drivers with holders on) are marked evicted and told through evictChannel;
// their drivers unlock that id alone and report the lock lost with
// driver.ErrForceReleased. A holder whose session is not a distlock driver's
// (an SQL client) loses its session to pg_terminate_backend at once; so do,
// after evictBound, holders that have not let go by then (a driver session
// without a row: a driver without holders, or one whose row never came).
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if !d.o.holders {
		return 0, errNoHolders("ForceRelease")
	}
	type hold struct {
		id  int64
		pid int32
	}
	var n int
	err := d.withAux(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		targets := map[hold]bool{} // the holds found, and whether told
		deadline := time.Now().Add(evictBound)
		for first := true; ; first = false {
			locks, _, err := d.advisoryLocks(ctx, conn, key)
			if err != nil {
				return err
			}
			var ids, terminate []int64
			var pids []int32
			left := 0
			for _, l := range locks {
				h := hold{l.id, l.pid}
				if !l.granted {
					continue
				}
				told, ok := targets[h]
				if first {
					targets[h] = false
				} else if !ok {
					continue // a later grant: not this ForceRelease's to evict
				}
				left++
				switch {
				case l.labelled && !told:
					ids, pids = append(ids, l.id), append(pids, l.pid)
					targets[h] = true
				case !l.labelled && !l.driverSession:
					terminate = append(terminate, int64(l.pid))
				}
			}
			if first {
				n = left
				if n == 0 {
					return driver.ErrNotHeld
				}
			}
			if left == 0 {
				break
			}
			if len(ids) > 0 {
				if _, err := conn.Exec(ctx, fmt.Sprintf(`WITH e AS (UPDATE %s SET evicted = clock_timestamp()
					WHERE (lock_id, pid) IN (SELECT * FROM unnest($1::bigint[], $2::integer[])) RETURNING lock_id, pid)
					SELECT count(pg_notify('`+evictChannel+`', lock_id || ' ' || pid)) FROM e`, d.holdersName()), ids, pids); err != nil {
					return err
				}
			}
			if time.Now().After(deadline) {
				terminate = terminate[:0]
				for _, l := range locks {
					if _, ok := targets[hold{l.id, l.pid}]; ok && l.granted {
						terminate = append(terminate, int64(l.pid))
					}
				}
			}
			if err := terminateAll(ctx, conn, terminate); err != nil {
				return err
			}
			if len(terminate) == 0 {
				t := time.NewTimer(10 * time.Millisecond)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
			}
		}
		var ids []int64
		var pids []int32
		for h, told := range targets {
			if told {
				ids, pids = append(ids, h.id), append(pids, h.pid)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		_, err := conn.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE (lock_id, pid) IN (SELECT * FROM unnest($1::bigint[], $2::integer[])) AND evicted IS NOT NULL`, d.holdersName()), ids, pids)
		return err
	})
	if err != nil {
		return 0, classify(ctx, err)
	}
	return n, nil
}

// terminateAll ends the sessions pids and waits (5 s at most) until they are gone.
func terminateAll(ctx context.Context, conn *pgx.Conn, pids []int64) error {
	if len(pids) == 0 {
		return nil
	}
	var ok []bool
	if err := conn.QueryRow(ctx, `SELECT array_agg(pg_terminate_backend(p::integer, 5000)) FROM unnest($1::bigint[]) p`, pids).Scan(&ok); err != nil {
		return fmt.Errorf("pgadvisory: ending the holding sessions %v: %w", pids, err)
	}
	return nil
}

// evictionsMissed acts on the eviction marks of this Driver's sessions made
// before its listening session's LISTEN was in force (run once it is).
func (d *Driver) evictionsMissed(ctx context.Context, conn *pgx.Conn) {
	d.mu.Lock()
	var pids []int32
	for _, c := range d.conns {
		if len(c.locks) > 0 {
			pids = append(pids, c.pid)
		}
	}
	d.mu.Unlock()
	if len(pids) == 0 {
		return
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT lock_id, pid FROM %s WHERE evicted IS NOT NULL AND pid = ANY($1::integer[])`, d.holdersName()), pids)
	if err != nil {
		return
	}
	type ev struct {
		id  int64
		pid int32
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ev, error) {
		var e ev
		err := r.Scan(&e.id, &e.pid)
		return e, err
	})
	if err != nil {
		return
	}
	for _, e := range evs {
		d.calls.Go(func() { d.evictLocal(e.id, e.pid) })
	}
}

// evicted handles an eviction notice's payload.
func (d *Driver) evicted(payload string) {
	a, b, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	id, err1 := strconv.ParseInt(a, 10, 64)
	pid, err2 := strconv.ParseInt(b, 10, 32)
	if err1 != nil || err2 != nil {
		return
	}
	d.calls.Go(func() { d.evictLocal(id, int32(pid)) })
}

// errForced is the loss cause of an evicted hold.
var errForced = fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrForceReleased)

// evictLocal gives up the hold of id on the session pid, if this Driver has
// it, and reports it lost as force-released. A hold being released already is
// left to its Release.
func (d *Driver) evictLocal(id int64, pid int32) {
	d.mu.Lock()
	var h *holding
	for _, c := range d.conns {
		if c.pid == pid && !c.dead.Load() {
			h = c.locks[id]
			break
		}
	}
	if h == nil || h.gone || h.release != nil || d.closed {
		d.mu.Unlock()
		return
	}
	p := &pendingRelease{done: make(chan struct{})}
	h.release = p
	h.c.users++
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(d.closing, stmtGrace)
	err := d.unlock(ctx, h, p)
	cancel()
	if err != nil {
		// Not unlocked (ForceRelease then ends the session), or lost with
		// its session, which reported it lost already.
		return
	}
	d.mu.Lock()
	if !d.closed && d.byOwner[h.k] == nil {
		// A tombstone: the holder's Release and Refresh say it was forced.
		h.gone, h.outcome = true, errForced
		d.byOwner[h.k] = h
	}
	d.mu.Unlock()
	if h.lost != nil {
		h.lost.Lost(errForced)
	}
}
