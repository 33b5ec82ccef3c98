package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// holdersURL is the shared test server's URL with the holders table on, under
// a prefix of the test's own (its table, <prefix>_holders, and its lock ids).
func holdersURL(t *testing.T, on bool) (dsn, prefix string) {
	t.Helper()
	prefix = strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	dsn = withParam(t, testserver.Postgres(t), "holders", fmt.Sprint(on))
	return dsn, prefix
}

func holdersLocker(t *testing.T, dsn, prefix string, opts ...lock.Option) (*lock.Locker, *pgadvisory.Driver) {
	t.Helper()
	d := mustOpen(t, dsn, pgadvisory.WithPrefix(prefix))
	lk := lock.New(d, opts...)
	t.Cleanup(func() { lk.Close() })
	return lk, d
}

// sessionPIDs are the backend pids of d's sessions.
func sessionPIDs(t *testing.T, conn *pgx.Conn, d *pgadvisory.Driver) []int32 {
	t.Helper()
	var pids []int32
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity WHERE application_name = $1`, d.ApplicationName()).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	return pids
}

// Without the holders table (the default) the driver writes nothing but the
// advisory lock: Inspect still counts holders and waiters from pg_locks, and
// names a holder by its session's pid; the operations that need the table say
// so.
func TestWithoutHoldersTable(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, false)
	lk, _ := holdersLocker(t, dsn, prefix, lock.WithOwnerName("alpha"))
	sql := connect(t, dsn)

	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	waiter := connect(t, dsn)
	id := pgadvisory.LockID(prefix, "k")
	queued := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, `SELECT pg_advisory_lock($1)`, id)
		queued <- err
	}()
	waitQueued(t, dsn, id, 1)
	in, err := lk.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Holders != 1 || in.Shared || in.Waiters != 1 || !strings.HasPrefix(in.Owner, "postgres pid ") || in.Token != 0 {
		t.Errorf("Inspect without the holders table: %+v, want 1 exclusive holder named by its pid, 1 waiter, no token", in)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"List":         func() error { _, err := lk.List(ctx, ""); return err }(),
		"ForceRelease": lk.ForceRelease(ctx, "k"),
	} {
		if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "holders=true") {
			t.Errorf("%s without the holders table: %v, want ErrUnsupported naming holders=true", name, err)
		}
	}
	var table *string
	if err := sql.QueryRow(ctx, `SELECT to_regclass($1)::text`, prefix+"_holders").Scan(&table); err != nil || table != nil {
		t.Errorf("holders table without holders=true: %v %v, want none created", table, err)
	}
}

// With holders=true a grant writes one row beside its advisory lock, naming the
// session that holds it, and its release deletes it; SQL clients of the same
// lock id still take part in the lock.
func TestHoldersRowLivesBesideTheLock(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, true)
	lk, d := holdersLocker(t, dsn, prefix, lock.WithOwnerName("alpha"))
	sql := connect(t, dsn)
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var pid int32
	var token int64
	var label []byte
	err = sql.QueryRow(ctx, fmt.Sprintf(`SELECT pid, token, label FROM %s WHERE lock_id = $1 AND key = $2`, pgx.Identifier{prefix + "_holders"}.Sanitize()),
		pgadvisory.LockID(prefix, "k"), []byte("k")).Scan(&pid, &token, &label)
	if err != nil {
		t.Fatalf("the holder's row: %v", err)
	}
	if pids := sessionPIDs(t, sql, d); !containsPID(pids, pid) || uint64(token) != l.Token() || !strings.Contains(string(label), `"alpha"`) {
		t.Errorf("row pid %d token %d label %s; the driver's sessions %v, token %d, owner alpha", pid, token, label, pids, l.Token())
	}
	var got bool
	if err := sql.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, pgadvisory.LockID(prefix, "k")).Scan(&got); err != nil || got {
		t.Fatalf("an SQL client's pg_try_advisory_lock while the driver holds the key: %v %v, want false", got, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := sql.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, pgx.Identifier{prefix + "_holders"}.Sanitize())).Scan(&n); err != nil || n != 0 {
		t.Errorf("rows after the release: %d %v, want 0", n, err)
	}
}

func containsPID(pids []int32, pid int32) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

// A row whose session no longer holds its id (left by a session that ended)
// is never reported.
func TestStaleHoldersRowIsIgnored(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, true)
	lk, _ := holdersLocker(t, dsn, prefix)
	sql := connect(t, dsn)
	// Creates the table.
	if _, err := lk.Inspect(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, sql, fmt.Sprintf(`INSERT INTO %s (lock_id, pid, key, owner, label, token, shared, permits) VALUES ($1, pg_backend_pid(), 'k', 'o', 'ghost', 7, false, 0)`,
		pgx.Identifier{prefix + "_holders"}.Sanitize()), pgadvisory.LockID(prefix, "k"))
	in, err := lk.Inspect(ctx, "k")
	if err != nil || in.Held || in.Token != 0 {
		t.Errorf("Inspect with a stale row: %+v %v, want free", in, err)
	}
	keys, err := lk.List(ctx, "")
	if err != nil || len(keys) != 0 {
		t.Errorf("List with a stale row: %q %v, want none", keys, err)
	}
	if err := lk.ForceRelease(ctx, "k"); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("ForceRelease with a stale row: %v, want ErrNotHeld", err)
	}
}

// ForceRelease of one lock of a session that holds others gives up that lock
// alone: the holder's driver unlocks it and reports it force-released, and the
// session, and every other lock on it, stays.
func TestForceReleaseEvictsOneLockOfAMultiplexedSession(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, true)
	lk, d := holdersLocker(t, dsn, prefix)
	op, _ := holdersLocker(t, dsn, prefix)
	sql := connect(t, dsn)
	a, err := lk.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := lk.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	before := sessionPIDs(t, sql, d)
	start := time.Now()
	if err := op.ForceRelease(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted lock's Lost did not close")
	}
	if err := a.Err(); !errors.Is(err, lock.ErrForceReleased) {
		t.Errorf("the evicted lock's Err: %v, want ErrForceReleased", err)
	}
	if took >= 3*time.Second {
		t.Errorf("ForceRelease took %v: the holder's driver did not let go before the bound, so its session was ended", took)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Errorf("the other lock of the session after the eviction: %v, want held", err)
	}
	if after := sessionPIDs(t, sql, d); !containsPID(after, before[0]) {
		t.Errorf("sessions %v before the eviction, %v after: want none ended", before, after)
	}
	c, err := op.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatalf("TryAcquire after the eviction: %v", err)
	}
	if c.Token() <= a.Token() {
		t.Errorf("token %d after the evicted %d", c.Token(), a.Token())
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("ForceRelease of a driver's lock: %v", took)
}

// A holder that is no distlock driver with holders (an SQL client) loses its
// session: pg_terminate_backend is the only way to free another session's
// advisory lock.
func TestForceReleaseEndsTheSessionOfAnSQLHolder(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, true)
	op, _ := holdersLocker(t, dsn, prefix)
	sql := connect(t, dsn)
	mustExec(t, sql, `SELECT pg_advisory_lock($1)`, pgadvisory.LockID(prefix, "k"))
	in, err := op.Inspect(ctx, "k")
	if err != nil || in.Holders != 1 || !strings.HasPrefix(in.Owner, "postgres pid ") {
		t.Fatalf("Inspect of an SQL client's lock: %+v %v, want one holder named by its pid", in, err)
	}
	if err := op.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := sql.Ping(ctx); err == nil {
		t.Error("the SQL holder's session survived ForceRelease")
	}
	l, err := op.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after ForceRelease: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder whose driver does not let go within the bound (here a row that an
// SQL session wrote for itself, so no driver hears the eviction) loses its
// session too, and ForceRelease returns after about the bound.
func TestForceReleaseEndsTheSessionOfAHolderThatDoesNotLetGo(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, true)
	op, _ := holdersLocker(t, dsn, prefix)
	if _, err := op.Inspect(ctx, "k"); err != nil { // creates the table
		t.Fatal(err)
	}
	sql := connect(t, dsn)
	id := pgadvisory.LockID(prefix, "k")
	mustExec(t, sql, `SELECT pg_advisory_lock($1)`, id)
	mustExec(t, sql, fmt.Sprintf(`INSERT INTO %s (lock_id, pid, key, owner, label, token, shared, permits) VALUES ($1, pg_backend_pid(), 'k', 'o', 'deaf', 1, false, 0)`,
		pgx.Identifier{prefix + "_holders"}.Sanitize()), id)
	start := time.Now()
	if err := op.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 3*time.Second || took > 10*time.Second {
		t.Errorf("ForceRelease of a holder that does not let go took %v, want about the 3 s bound", took)
	}
	if err := sql.Ping(ctx); err == nil {
		t.Error("the holder's session survived ForceRelease")
	}
}

// A driver's session that holds the key without a row (a driver without
// holders, or one between its grant and its row's write) is not ended at once
// as an SQL client's is: it has the bound to let go (its row may be on its
// way), then its session is ended.
func TestForceReleaseGivesADriverSessionWithoutARowTheBound(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, true)
	op, _ := holdersLocker(t, dsn, prefix)
	plain, _ := holdersLocker(t, withParam(t, dsn, "holders", "false"), prefix)
	l, err := plain.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := op.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("ForceRelease ended a driver session without a row after %v, want the 3 s bound first", took)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder's Lost did not close after its session was ended")
	}
	if err := l.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("the holder's Err: %v, want ErrLost", err)
	}
}

// An eviction marked while the holder's driver has no listening session (it
// ended) is found when the driver listens again, which it does by itself
// while it holds locks: the holder still lets go of that lock alone, within
// the bound, and learns that it was forced.
func TestEvictionMarkedWhileNotListeningIsHeardOnceListeningAgain(t *testing.T) {
	ctx := context.Background()
	dsn, prefix := holdersURL(t, true)
	lk, d := holdersLocker(t, dsn, prefix)
	op, _ := holdersLocker(t, dsn, prefix)
	sql := connect(t, dsn)
	a, err := lk.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	eventually(t, 10*time.Second, "the holder's driver listening", func() bool {
		pid = pgadvisory.ListenerPIDForTest(d)
		return pid != 0
	})
	mustExec(t, sql, `SELECT pg_terminate_backend($1, 5000)`, int32(pid))
	start := time.Now()
	if err := op.ForceRelease(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 3*time.Second {
		t.Errorf("ForceRelease took %v: the mark was not read by the new listening session, so the holder's session was ended", took)
	}
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted lock's Lost did not close")
	}
	if err := a.Err(); !errors.Is(err, lock.ErrForceReleased) {
		t.Errorf("the evicted lock's Err: %v, want ErrForceReleased", err)
	}
	if p := pgadvisory.ListenerPIDForTest(d); p == 0 || p == pid {
		t.Errorf("listening session %d after the first (%d) ended, want a new one", p, pid)
	}
}

// A user who may not create the holders table gets an error that says what to
// run, and the lock it was granted is given back; once a privileged user ran
// it, locking with holders works. Inspect without the right to create it
// fails the same way.
func TestHoldersWithoutDDLRightsFailClearlyUntilTheTableIsGranted(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	admin := connect(t, dsn)
	role := "holder_without_ddl"
	table := pgx.Identifier{role + "_holders"}.Sanitize()
	cleanup := func() {
		_, _ = admin.Exec(context.Background(), `DROP TABLE IF EXISTS `+table)
		_, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	}
	cleanup()
	t.Cleanup(cleanup)
	mustExec(t, admin, `CREATE ROLE `+role+` LOGIN`) // PostgreSQL 15: no CREATE on schema public
	userURL := withParam(t, withParam(t, withParam(t, asRole(t, dsn, role), "prefix", role), "fencing", "false"), "holders", "true")
	locker, err := lock.Open(ctx, userURL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	_, err = locker.TryAcquire(ctx, "k")
	if err == nil {
		t.Fatal("TryAcquire with holders and no right to create the table succeeded")
	}
	for _, want := range []string{"permission denied", "CREATE UNLOGGED TABLE IF NOT EXISTS " + table, "GRANT SELECT, INSERT, UPDATE, DELETE ON " + table, "given back"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Logf("%v", err)
	var held bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid)`, pgadvisory.LockID(role, "k")).Scan(&held); err != nil || held {
		t.Errorf("the lock after the failed TryAcquire: held %v (%v), want given back", held, err)
	}
	if _, err := locker.Inspect(ctx, "k"); err == nil || !strings.Contains(err.Error(), "CREATE UNLOGGED TABLE") {
		t.Errorf("Inspect with holders and no table: %v, want the error naming the statement", err)
	}

	mustExec(t, admin, fmt.Sprintf(strings.ReplaceAll(pgadvisory.CreateHoldersSQLForTest, "\n", " "), table))
	mustExec(t, admin, `GRANT SELECT, INSERT, UPDATE, DELETE ON `+table+` TO `+role)
	l, err := locker.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire once the table is granted: %v", err)
	}
	in, err := locker.Inspect(ctx, "k")
	if err != nil || in.Holders != 1 || strings.HasPrefix(in.Owner, "postgres pid") {
		t.Errorf("Inspect once the table is granted: %+v %v, want the holder's row", in, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
