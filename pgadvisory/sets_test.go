package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// setAcquirer is d as a driver.SetAcquirer, or the test fails.
func setAcquirer(t *testing.T, d *pgadvisory.Driver) driver.SetAcquirer {
	t.Helper()
	sa, ok := driver.Driver(d).(driver.SetAcquirer)
	if !ok {
		t.Fatal("pgadvisory.Driver does not implement driver.SetAcquirer")
	}
	return sa
}

// setRequests returns one request per key (distinct owners), sorted by key
// as the portable layer sends them, each with opt applied.
func setRequests(t *testing.T, keys []string, opt func(*driver.Request)) []*driver.Request {
	reqs := make([]*driver.Request, len(keys))
	for i, k := range keys {
		reqs[i] = &driver.Request{Key: k, Owner: fmt.Sprintf("5e7%022x", i+1), TTL: time.Minute,
			Lost: driver.LostFunc(func(err error) { t.Errorf("%s reported lost: %v", k, err) })}
		if opt != nil {
			opt(reqs[i])
		}
	}
	return reqs
}

// setKeys returns n keys of the test, in byte order.
func setKeys(t *testing.T, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", t.Name(), i)
	}
	return keys
}

// statements counts the statements the server has run, but for the
// counting query's own (pg_stat_statements counts each execution as it ends).
func statements(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE query NOT LIKE '%pg_stat_statements%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// AcquireAll of four free keys costs the server one statement, where taking
// them one at a time costs four: counted by pg_stat_statements on a private
// server that runs nothing else.
func TestFourFreeKeysAreTakenInOneStatement(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartPostgres(t, "-c", "shared_preload_libraries=pg_stat_statements", "-c", "pg_stat_statements.track=all")
	dsn := srv.URL()
	admin := connect(t, dsn)
	mustExec(t, admin, `CREATE EXTENSION pg_stat_statements`)
	d, locker := openDriver(t, dsn)
	keys := setKeys(t, 4)
	// A first lock opens the session and resolves the fencing sequence.
	l, err := locker.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for round := range 3 {
		before := statements(t, admin)
		s, err := locker.AcquireAll(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		if n := statements(t, admin) - before; n != 1 {
			t.Errorf("round %d: AcquireAll of %d free keys ran %d statements on the server, want 1", round, len(keys), n)
		}
		if _, held := sessions(t, dsn, d); held != len(keys) {
			t.Errorf("round %d: the driver's sessions hold %d advisory locks, want %d", round, held, len(keys))
		}
		for _, k := range keys {
			if tok := s.Lock(k).Token(); tok <= last {
				t.Errorf("round %d: %s has token %d, not above the last set's %d", round, k, tok, last)
			}
		}
		last = s.Lock(keys[0]).Token()
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The path it replaces, for comparison: one statement per key.
	before := statements(t, admin)
	for _, k := range keys {
		l, err := locker.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx) //nolint:errcheck // released at the end of the test
	}
	if n := statements(t, admin) - before; n != int64(len(keys)) {
		t.Errorf("%d Acquires ran %d statements, want %d", len(keys), n, len(keys))
	}
}

// A set with one key held elsewhere (by another client, or by another owner
// in the same Driver) is refused with ErrLocked in one attempt, and leaves
// no lock of the set held: the driver's sessions hold only what they held
// before.
func TestASetWithOneHeldKeyTakesNothing(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	for _, where := range []string{"another client", "another owner here"} {
		t.Run(where, func(t *testing.T) {
			d, locker := openDriver(t, dsn)
			holder := locker
			if where == "another client" {
				_, holder = openDriver(t, dsn)
			}
			keys := setKeys(t, 4)
			l, err := holder.Acquire(ctx, keys[2])
			if err != nil {
				t.Fatal(err)
			}
			_, before := sessions(t, dsn, d)
			reqs := setRequests(t, keys, nil)
			if _, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs); !errors.Is(err, driver.ErrLocked) {
				t.Fatalf("TryAcquireSet with %s held by %s = %v, want ErrLocked", keys[2], where, err)
			}
			if _, after := sessions(t, dsn, d); after != before {
				t.Errorf("the driver's sessions hold %d advisory locks after the refused set, %d before", after, before)
			}
			for _, req := range reqs {
				if err := d.Release(ctx, req); !errors.Is(err, driver.ErrNotHeld) {
					t.Errorf("Release(%s) after the refused set = %v, want ErrNotHeld", req.Key, err)
				}
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			gs, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs)
			if err != nil || len(gs) != len(reqs) {
				t.Fatalf("TryAcquireSet once every key is free = %v, %v", gs, err)
			}
			for _, req := range reqs {
				if err := d.Release(ctx, req); err != nil {
					t.Errorf("Release(%s): %v", req.Key, err)
				}
			}
		})
	}
}

// A shared set whose key has a writer waiting behind its reader is not
// granted past the writer (the queue rule of a single shared TryAcquire),
// and takes none of its keys; once the writer has had its turn, the same
// set is granted.
func TestASetIsNotGrantedPastAKeysWaiters(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	_, reader := openDriver(t, dsn)
	_, writer := openDriver(t, dsn)
	d, _ := openDriver(t, dsn)
	keys := setKeys(t, 3)
	r, err := reader.Acquire(ctx, keys[1], lock.WithShared(true))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	written := make(chan error, 1)
	go func() {
		w, err := writer.Acquire(wctx, keys[1])
		if err == nil {
			err = w.Release(ctx)
		}
		written <- err
	}()
	admin := connect(t, dsn)
	eventually(t, 10*time.Second, "the writer queued behind the reader", func() bool {
		return waiters(t, admin, pgadvisory.LockID(pgadvisory.DefaultPrefix, keys[1])) == 1
	})
	reqs := setRequests(t, keys, func(r *driver.Request) { r.Shared = true })
	if gs, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("a shared set with a writer waiting on %s = %v, %v; want ErrLocked", keys[1], gs, err)
	}
	if _, held := sessions(t, dsn, d); held != 0 {
		t.Errorf("the refused set left %d advisory locks held", held)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	gs, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs)
	if err != nil || len(gs) != len(reqs) {
		t.Fatalf("the shared set once the writer is gone = %v, %v", gs, err)
	}
	for _, req := range reqs {
		if err := d.Release(ctx, req); err != nil {
			t.Errorf("Release(%s): %v", req.Key, err)
		}
	}
}

// A shared set whose key another owner of the same Driver holds shared is
// taken on another session: a session asked for a lock it holds would grant
// it again, and two owners would share one server-side hold.
func TestASetNeverJoinsAnotherOwnersHoldOnItsSession(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	d, locker := openDriver(t, dsn)
	keys := setKeys(t, 2)
	l, err := locker.Acquire(ctx, keys[0], lock.WithShared(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx) //nolint:errcheck // released at the end of the test
	reqs := setRequests(t, keys, func(r *driver.Request) { r.Shared = true })
	if _, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var pids int
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, keys[0])
	if err := connect(t, dsn).QueryRow(ctx, `SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, id).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	if pids != 2 {
		t.Errorf("%s is held shared by two owners of one Driver on %d sessions, want 2", keys[0], pids)
	}
	for _, req := range reqs {
		if err := d.Release(ctx, req); err != nil {
			t.Errorf("Release(%s): %v", req.Key, err)
		}
	}
}

// Permits, sets of mixed shapes and keys that meet on one lock id cannot be
// taken in one statement: TryAcquireSet says so (ErrUnsupported) and takes
// nothing, and AcquireAll takes them one at a time.
func TestASetTheStatementCannotTakeIsUnsupported(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	for _, c := range []struct {
		name string
		opt  func(*driver.Request)
		all  []lock.Option
	}{
		{"permits", func(r *driver.Request) { r.Permits = 3 }, []lock.Option{lock.WithPermits(3)}},
		{"mixed shapes", func(r *driver.Request) { r.Shared = r.Key[len(r.Key)-1] == '0' }, nil},
		{"one lock id", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, locker := openDriver(t, dsn)
			if c.name == "one lock id" {
				pgadvisory.SetLockIDForTest(d, func(string) int64 { return 41 })
			}
			keys := setKeys(t, 2)
			if _, err := setAcquirer(t, d).TryAcquireSet(ctx, setRequests(t, keys, c.opt)); !errors.Is(err, driver.ErrUnsupported) {
				t.Errorf("TryAcquireSet = %v, want ErrUnsupported", err)
			}
			if _, held := sessions(t, dsn, d); held != 0 {
				t.Errorf("the refused set left %d advisory locks held", held)
			}
			if c.name == "one lock id" {
				return // one by one the second key waits for the first
			}
			s, err := locker.TryAcquireAll(ctx, keys, c.all...)
			if err != nil {
				t.Fatalf("TryAcquireAll one key at a time: %v", err)
			}
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The set statement works in every query mode, exclusive and shared: it
// takes a free set, and refuses one with a key held elsewhere, taking none.
func TestEveryQueryExecModeTakesSets(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", mode, shared), func(t *testing.T) {
				url := withParam(t, dsn, "default_query_exec_mode", mode)
				d, _ := openDriver(t, url)
				_, other := openDriver(t, url)
				keys := setKeys(t, 3)
				reqs := setRequests(t, keys, func(r *driver.Request) { r.Shared = shared })
				if gs, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs); err != nil || len(gs) != len(reqs) || gs[0].Token == 0 {
					t.Fatalf("TryAcquireSet of free keys = %v, %v", gs, err)
				}
				if _, held := sessions(t, dsn, d); held != len(keys) {
					t.Errorf("the driver's sessions hold %d advisory locks, want %d", held, len(keys))
				}
				for _, req := range reqs {
					if err := d.Release(ctx, req); err != nil {
						t.Fatalf("Release(%s): %v", req.Key, err)
					}
				}
				l, err := other.Acquire(ctx, keys[1])
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx) //nolint:errcheck // released at the end of the test
				if _, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs); !errors.Is(err, driver.ErrLocked) {
					t.Fatalf("TryAcquireSet with %s held elsewhere = %v, want ErrLocked", keys[1], err)
				}
				if _, held := sessions(t, dsn, d); held != 0 {
					t.Errorf("the refused set left %d advisory locks held", held)
				}
			})
		}
	}
}

// A set whose caller's context ended before the server answered, and which
// the server then grants, is given back whole: no lock of it stays held, on
// the server or in the driver's books.
func TestASetGrantedAfterItsContextEndedLeavesNoLock(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartPostgres(t)
	t.Cleanup(func() { _ = srv.Resume() })
	d := mustOpen(t, srv.URL())
	pgadvisory.SetStatementGraceForTest(d, time.Minute)
	locker := lock.New(d, lock.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })
	// The session the set will use.
	warm, err := locker.TryAcquire(ctx, t.Name()+"/warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	tried := make(chan error, 1)
	go func() {
		tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := setAcquirer(t, d).TryAcquireSet(tctx, setRequests(t, setKeys(t, 4), nil))
		tried <- err
	}()
	select {
	case err := <-tried:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("TryAcquireSet against a frozen server = %v, want DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TryAcquireSet with a 100ms context did not return within 5s against a frozen server")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	probe := connect(t, srv.URL())
	eventually(t, 10*time.Second, "the set given back", func() bool {
		var locks int
		if err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE a.application_name = $1 AND l.locktype = 'advisory'`, d.ApplicationName()).Scan(&locks); err != nil {
			t.Fatal(err)
		}
		return locks == 1 && pgadvisory.BusyConnsForTest(d) == 0
	})
	if n := pgadvisory.HoldingsForTest(d); n != 1 {
		t.Errorf("the driver's books keep %d locks, want 1 (the warm-up lock)", n)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
