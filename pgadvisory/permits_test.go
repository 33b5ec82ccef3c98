package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/internal/waketest"
	"github.com/distlock/lock/pgadvisory"
)

// PermitID is the documented expression, which an operator runs in psql to
// find a semaphore's slots in pg_locks; and the permits a Driver holds are
// exactly slots of that expression, held exclusively.
func TestPermitsAreHeldOnTheDocumentedSlotIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	conn := connect(t, dsn)
	for _, key := range []string{"pool", "reports:nightly", "ünïcode/ключ", "a\nb"} {
		for i := 0; i < 4; i++ {
			var got int64
			err := conn.QueryRow(ctx, `SELECT ('x' || encode(substring(sha256(convert_to($1 || chr(10) || $2, 'UTF8') || '\xff'::bytea || convert_to($3::int::text, 'UTF8')) for 8), 'hex'))::bit(64)::bigint`,
				pgadvisory.DefaultPrefix, key, i).Scan(&got)
			if err != nil {
				t.Fatal(err)
			}
			if want := pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, i); got != want {
				t.Fatalf("SQL gives %d for slot %d of %q, PermitID %d", got, i, key, want)
			}
		}
		if pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 0) == pgadvisory.LockID(pgadvisory.DefaultPrefix, key) {
			t.Fatalf("slot 0 of %q is its lock id", key)
		}
	}

	d, locker := openDriver(t, dsn, lock.WithPermits(3))
	var held []*lock.Lock
	for i := 0; i < 2; i++ {
		l, err := locker.TryAcquire(ctx, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	var exclusive, other int
	err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE l.mode = 'ExclusiveLock' AND s.id IS NOT NULL),
		count(*) FILTER (WHERE s.id IS NULL)
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		LEFT JOIN unnest($2::bigint[]) AS s(id) ON l.classid = ((s.id >> 32) & 4294967295)::oid AND l.objid = (s.id & 4294967295)::oid
		WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`,
		d.ApplicationName(),
		[]int64{pgadvisory.PermitID(pgadvisory.DefaultPrefix, t.Name(), 0), pgadvisory.PermitID(pgadvisory.DefaultPrefix, t.Name(), 1), pgadvisory.PermitID(pgadvisory.DefaultPrefix, t.Name(), 2)}).Scan(&exclusive, &other)
	if err != nil {
		t.Fatal(err)
	}
	if exclusive != 2 || other != 0 {
		t.Fatalf("2 permits held as %d exclusive slot locks and %d other advisory locks, want 2 and 0", exclusive, other)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Within one Driver every use of a key is seen: permits of another n, a lock
// on a semaphore, and permits on a lock are ErrInvalidArgument while the
// first use holds; once it is released the key may be used otherwise.
func TestOtherShapesOfAKeyHeldInTheSameProcessAreInvalid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, locker := openDriver(t, testserver.Postgres(t))
	key := t.Name()
	sem, err := locker.TryAcquire(ctx, key, lock.WithPermits(3))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		opts []lock.Option
	}{
		{"2 permits on a semaphore of 3", []lock.Option{lock.WithPermits(2)}},
		{"an exclusive lock on a semaphore", nil},
		{"a shared lock on a semaphore", []lock.Option{lock.WithShared(true)}},
	} {
		if _, err := locker.TryAcquire(ctx, key, c.opts...); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("TryAcquire of %s = %v, want ErrInvalidArgument", c.what, err)
		}
		if _, err := locker.Acquire(ctx, key, c.opts...); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Acquire of %s = %v, want ErrInvalidArgument", c.what, err)
		}
	}
	if err := sem.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("the exclusive lock once the semaphore is free: %v", err)
	}
	if _, err := locker.TryAcquire(ctx, key, lock.WithPermits(3)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("TryAcquire of permits on a key held as a lock = %v, want ErrInvalidArgument", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Across processes a mismatch is seen when a request finds every one of its
// permits held: the slot beyond its last held (a semaphore of more permits),
// or the key's lock id held (the key used as a lock), is ErrInvalidArgument.
func TestOtherShapesOfAKeyElsewhereAreInvalidOnceThePermitsAreFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	key := t.Name()
	_, three := openDriver(t, dsn, lock.WithPermits(3))
	for i := 0; i < 3; i++ {
		if _, err := three.TryAcquire(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	_, two := openDriver(t, dsn, lock.WithPermits(2))
	if _, err := two.TryAcquire(ctx, key); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("TryAcquire of 2 permits while a semaphore of 3 is full = %v, want ErrInvalidArgument", err)
	}
	if _, err := two.Acquire(ctx, key); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Acquire of 2 permits while a semaphore of 3 is full = %v, want ErrInvalidArgument", err)
	}

	other := key + "/lock"
	_, plain := openDriver(t, dsn)
	if _, err := plain.TryAcquire(ctx, other); err != nil {
		t.Fatal(err)
	}
	_, a := openDriver(t, dsn, lock.WithPermits(2))
	_, b := openDriver(t, dsn, lock.WithPermits(2))
	// Not seen while permits are free: the check costs nothing then.
	for _, lk := range []*lock.Locker{a, a} {
		if _, err := lk.TryAcquire(ctx, other); err != nil {
			t.Fatalf("a permit while the semaphore has room: %v", err)
		}
	}
	if _, err := b.TryAcquire(ctx, other); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("TryAcquire of a full semaphore whose key another client holds as a lock = %v, want ErrInvalidArgument", err)
	}
}

// A waiting permit request queues on one slot in the server, but takes a
// permit given back on another slot while the holder of its own slot keeps
// holding: it tries every slot again every permitRescan (a free by an SQL
// client announces nothing to wake it sooner), wake-ups it reports as the
// timer's. The slots are held by plain SQL sessions, as any client of the
// documented ids may.
func TestPermitWaiterTakesAPermitFreedOnAnotherSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	key := t.Name()
	slots := []int64{pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 0), pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 1)}
	holders := []*pgx.Conn{connect(t, dsn), connect(t, dsn)}
	for i, h := range holders {
		mustExec(t, h, `SELECT pg_advisory_lock($1)`, slots[i])
	}
	_, locker := openDriver(t, dsn, lock.WithPermits(2))
	if _, err := locker.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrLocked", err)
	}
	type grant struct {
		l   *lock.Lock
		err error
	}
	got := make(chan grant, 1)
	var wakes waketest.Log
	go func() {
		l, err := locker.Acquire(wakes.Context(ctx), key)
		got <- grant{l, err}
	}()
	probe := connect(t, dsn)
	queued := -1
	eventually(t, 10*time.Second, "the permit request queued on a slot", func() bool {
		for i, id := range slots {
			if waiters(t, probe, id) > 0 {
				queued = i
				return true
			}
		}
		return false
	})
	freed := 1 - queued
	start := time.Now()
	mustExec(t, holders[freed], `SELECT pg_advisory_unlock($1)`, slots[freed])
	g := <-got
	if g.err != nil {
		t.Fatalf("Acquire with a permit freed on the other slot: %v", g.err)
	}
	t.Logf("the waiter queued on slot %d took slot %d %v after its release", queued, freed, time.Since(start))
	wakes.Only(t, driver.WakeTimer, "nothing announced the free slot")
	var still bool
	if err := holders[queued].QueryRow(ctx, `SELECT count(*) = 1 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND granted`).Scan(&still); err != nil || !still {
		t.Fatalf("the holder of the waiter's slot no longer holds it (%v)", err)
	}
	if err := g.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A permit given back on another slot than the one a waiter is queued on
// wakes the waiter through the releasing statement's announcement
// (pg_notify, heard by the waiter's Driver), not by its rescan, which this
// test puts off for an hour: a wake-up it reports as a notification.
func TestPermitGivenBackOnAnotherSlotWakesTheWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	key := t.Name()
	slots := []int64{pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 0), pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 1)}
	probe := connect(t, dsn)
	type holder struct {
		d *pgadvisory.Driver
		l *lock.Lock
	}
	var holders []holder
	for i := 0; i < 2; i++ {
		d, lk := openDriver(t, dsn, lock.WithPermits(2))
		l, err := lk.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, holder{d, l})
	}
	d, locker := openDriver(t, dsn, lock.WithPermits(2))
	pgadvisory.SetPermitRescanForTest(d, time.Hour, time.Hour)
	type grant struct {
		l   *lock.Lock
		err error
	}
	got := make(chan grant, 1)
	var wakes waketest.Log
	go func() {
		l, err := locker.Acquire(wakes.Context(ctx), key)
		got <- grant{l, err}
	}()
	queued := -1
	eventually(t, 10*time.Second, "the permit request queued on a slot", func() bool {
		for i, id := range slots {
			if waiters(t, probe, id) > 0 {
				queued = i
				return true
			}
		}
		return false
	})
	eventually(t, 10*time.Second, "the waiter's Driver listening for permits given back", func() bool {
		return pgadvisory.PermitListeningForTest(d)
	})
	var other, mine holder
	for _, h := range holders {
		if holdsID(t, probe, h.d, slots[queued]) {
			mine = h
		} else {
			other = h
		}
	}
	if mine.l == nil || other.l == nil {
		t.Fatalf("the two holders do not hold one slot each")
	}
	start := time.Now()
	if err := other.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g.err != nil {
		t.Fatalf("Acquire with a permit given back on the other slot: %v", g.err)
	}
	t.Logf("the waiter queued on slot %d took the other slot %v after its release", queued, time.Since(start))
	wakes.Only(t, driver.WakeNotified, "the announcement woke it, the rescan was an hour away")
	if !holdsID(t, probe, mine.d, slots[queued]) {
		t.Fatal("the holder of the waiter's slot no longer holds it")
	}
	if err := g.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mine.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// holdsID reports whether a session of d holds the advisory lock id.
func holdsID(t testing.TB, conn *pgx.Conn, d *pgadvisory.Driver, id int64) bool {
	t.Helper()
	var held bool
	err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.classid = (($2::bigint >> 32) & 4294967295)::oid AND l.objid = ($2::bigint & 4294967295)::oid)`, d.ApplicationName(), id).Scan(&held)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// A permit's unlock frees the slot at once and announces it when the
// statement commits; if the announcement fails (a full NOTIFY queue, here a
// pg_notify that raises, found first on the session's search_path), the
// slot is free all the same, and Release says so rather than keep it in the
// books as held.
func TestPermitReleaseWhoseAnnouncementFailsFreesThePermit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	admin := connect(t, dsn)
	mustExec(t, admin, `CREATE SCHEMA IF NOT EXISTS notify_fails`)
	mustExec(t, admin, `CREATE OR REPLACE FUNCTION notify_fails.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'announcement refused'; END $$`)
	t.Cleanup(func() { mustExec(t, admin, `DROP SCHEMA notify_fails CASCADE`) })

	d, locker := openDriver(t, dsn, lock.WithPermits(2))
	l, err := locker.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := pgadvisory.ExecOnLockSessionsForTest(d, `SET search_path = notify_fails, pg_catalog, public`); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release of a permit whose announcement failed: %v", err)
	}
	for i := 0; i < 2; i++ {
		if holdsID(t, admin, d, pgadvisory.PermitID(pgadvisory.DefaultPrefix, t.Name(), i)) {
			t.Fatalf("slot %d still held after the release", i)
		}
	}
	_, other := openDriver(t, dsn, lock.WithPermits(2))
	for i := 0; i < 2; i++ {
		if _, err := other.TryAcquire(ctx, t.Name()); err != nil {
			t.Fatalf("permit %d of 2 after the release: %v", i+1, err)
		}
	}
}

// A permit request tries every slot in one statement, and a waiting one on a
// semaphore found full a moment ago tries them all and queues in one more
// (and none before it): counted by pg_stat_statements on a private server,
// where the slots are held by SQL sessions.
func TestAPermitCostsOneStatementToTryEverySlotAndOneToWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := testserver.StartPostgres(t, "-c", "shared_preload_libraries=pg_stat_statements", "-c", "pg_stat_statements.track=all")
	dsn := srv.URL()
	admin := connect(t, dsn)
	mustExec(t, admin, `CREATE EXTENSION pg_stat_statements`)
	const n = 4
	key := t.Name()
	slots := make([]int64, n)
	holders := make([]*pgx.Conn, n)
	for i := range slots {
		slots[i] = pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, i)
		holders[i] = connect(t, dsn)
	}
	hold := func(i int) { mustExec(t, holders[i], `SELECT pg_advisory_lock($1)`, slots[i]) }
	// Which slot a waiting request is queued on (the query is not counted).
	queuedOn := func() int {
		for i, id := range slots {
			var w int
			if err := admin.QueryRow(ctx, `SELECT count(*) AS not_in_pg_stat_statements FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
				AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid AND NOT granted`, id).Scan(&w); err != nil {
				t.Fatal(err)
			}
			if w > 0 {
				return i
			}
		}
		return -1
	}
	_, locker := openDriver(t, dsn, lock.WithPermits(n))
	// A first lock opens the session and resolves the fencing sequence.
	l, err := locker.Acquire(ctx, key+"/warm-up", lock.WithPermits(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n-1; i++ {
		hold(i)
	}
	before := statements(t, admin)
	l, err = locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire with one slot free: %v", err)
	}
	if got := statements(t, admin) - before; got != 1 {
		t.Errorf("TryAcquire found the free slot of %d in %d statements, want 1", n, got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hold(n - 1)
	// Full: the first look reads pg_locks for other shapes of the key (two
	// statements), the next within a second does not.
	if _, err := locker.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrLocked", err)
	}
	before = statements(t, admin)
	if _, err := locker.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrLocked", err)
	}
	if got := statements(t, admin) - before; got != 1 {
		t.Errorf("TryAcquire of a full semaphore of %d ran %d statements, want 1", n, got)
	}
	// Waits: the first also tries on a shared session first and starts the
	// Driver's listening session; the second, the semaphore found full a
	// moment ago, runs only its wait (and the SQL holder's unlock).
	for round := range 2 {
		got := make(chan error, 1)
		before = statements(t, admin)
		go func() {
			l, err := locker.Acquire(ctx, key)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		q := -1
		eventually(t, 10*time.Second, "the permit request queued on a slot", func() bool { q = queuedOn(); return q >= 0 })
		mustExec(t, holders[q], `SELECT pg_advisory_unlock($1)`, slots[q])
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		// The wait, the holder's unlock and the release.
		if n := statements(t, admin) - before; round == 1 && n != 3 {
			t.Errorf("a wait on a semaphore found full a moment ago ran %d statements besides the holder's unlock and its release, want 1", n-2)
		}
		hold(q)
	}
}
