package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// openDriver opens a Driver and a Locker over it, closed at the end of the test.
func openDriver(t testing.TB, dsn string, opts ...lock.Option) (*pgadvisory.Driver, *lock.Locker) {
	t.Helper()
	d, err := pgadvisory.OpenForTest(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	locker := lock.New(d, opts...)
	t.Cleanup(func() { _ = locker.Close() })
	return d, locker
}

// sessions counts the server sessions of d and the advisory locks they hold.
func sessions(t testing.TB, dsn string, d *pgadvisory.Driver) (conns, locks int) {
	t.Helper()
	err := connect(t, dsn).QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM pg_stat_activity WHERE application_name = $1),
		(SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1 AND l.locktype = 'advisory')`,
		d.ApplicationName()).Scan(&conns, &locks)
	if err != nil {
		t.Fatal(err)
	}
	return conns, locks
}

// 10,000 held locks share a handful of connections: DefaultLocksPerConn on each
// when taken one after another, a few more when taken from many goroutines at
// once.
func TestTenThousandHeldLocksShareAHandfulOfConnections(t *testing.T) {
	const n = 10000
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	for _, goroutines := range []int{1, 8} {
		t.Run(fmt.Sprintf("goroutines=%d", goroutines), func(t *testing.T) {
			d, locker := openDriver(t, dsn)
			held := make([]*lock.Lock, n)
			var wg sync.WaitGroup
			errc := make(chan error, goroutines)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := g; i < n; i += goroutines {
						l, err := locker.Acquire(ctx, fmt.Sprintf("%s/%d", t.Name(), i))
						if err != nil {
							errc <- err
							return
						}
						held[i] = l
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			conns, locks := sessions(t, dsn, d)
			t.Logf("%d locks held by %d goroutines on %d connections", locks, goroutines, conns)
			if locks != n {
				t.Errorf("the server shows %d advisory locks of the driver, want %d", locks, n)
			}
			full := (n + pgadvisory.DefaultLocksPerConn - 1) / pgadvisory.DefaultLocksPerConn
			if goroutines == 1 && conns != full {
				t.Errorf("%d locks taken one after another use %d connections, want %d", n, conns, full)
			}
			// A connection is added only when the others are full or have a
			// queue of callers, one at a time.
			if conns > full+2 {
				t.Errorf("%d locks taken by %d goroutines use %d connections, want at most %d", n, goroutines, conns, full+2)
			}
			var most int
			if err := connect(t, dsn).QueryRow(ctx, `SELECT max(n) FROM (SELECT count(*) AS n FROM pg_locks l
				JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1 AND l.locktype = 'advisory' GROUP BY pid) s`,
				d.ApplicationName()).Scan(&most); err != nil {
				t.Fatal(err)
			}
			t.Logf("the fullest connection holds %d locks (soft limit %d)", most, pgadvisory.DefaultLocksPerConn)
			// Soft: callers already on a connection when it fills finish there;
			// the others wait for the next one to open.
			if most > pgadvisory.DefaultLocksPerConn*11/10 {
				t.Errorf("a connection holds %d locks, well above the soft limit %d", most, pgadvisory.DefaultLocksPerConn)
			}
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, locks := sessions(t, dsn, d); locks != 0 {
				t.Errorf("%d advisory locks left after releasing all", locks)
			}
		})
	}
}

// PostgreSQL grants a session a lock it already holds. Many owners of one Locker,
// on one key, must still exclude each other, whether they try or wait.
func TestOwnersInOneProcessExcludeEachOther(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	_, locker := openDriver(t, dsn)
	var inside, max atomic.Int32
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 30; r++ {
				var l *lock.Lock
				var err error
				if (g+r)%2 == 0 {
					l, err = locker.Acquire(ctx, t.Name())
				} else if l, err = locker.TryAcquire(ctx, t.Name()); errors.Is(err, lock.ErrLocked) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				if n := inside.Add(1); n > max.Load() {
					max.Store(n)
				}
				time.Sleep(100 * time.Microsecond) // widen the window for a second holder
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if max.Load() != 1 {
		t.Fatalf("%d holders at once in one process", max.Load())
	}
}

// Two keys that hash to one id are one lock, also inside one process, where the
// shared session would otherwise grant both.
func TestCollidingKeysInOneProcessExcludeEachOther(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	d, locker := openDriver(t, dsn)
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, t.Name())
	pgadvisory.SetLockIDForTest(d, func(string) int64 { return id })

	a, err := locker.TryAcquire(ctx, "key-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryAcquire(ctx, "key-b"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a colliding key = %v, want ErrLocked", err)
	}
	if _, err := locker.TryAcquire(ctx, "key-b", lock.WithShared(true)); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("shared TryAcquire of a colliding key = %v, want ErrLocked", err)
	}
	got := make(chan error, 1)
	var b *lock.Lock
	go func() {
		var err error
		b, err = locker.Acquire(ctx, "key-b")
		got <- err
	}()
	waitQueued(t, dsn, id, 1)
	select {
	case err := <-got:
		t.Fatalf("Acquire of a colliding key returned (%v) while the other key was held", err)
	default: // it waits in the server's queue
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire of the colliding key after the release: %v", err)
	}
	if _, err := locker.TryAcquire(ctx, "key-a"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of key-a while key-b holds the shared id = %v, want ErrLocked", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Shared holders of colliding keys may share.
	s1, err := locker.TryAcquire(ctx, "key-a", lock.WithShared(true))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := locker.TryAcquire(ctx, "key-b", lock.WithShared(true))
	if err != nil {
		t.Fatalf("second shared holder of the id: %v", err)
	}
	if _, err := locker.TryAcquire(ctx, "key-c"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("exclusive TryAcquire while shared holders hold the id = %v, want ErrLocked", err)
	}
	for _, l := range []*lock.Lock{s1, s2} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, locks := sessions(t, dsn, d); locks != 0 {
		t.Errorf("%d advisory locks left", locks)
	}
}

// A backend ended by an operator takes only its own locks with it, and they
// are reported lost at once (not at the next refresh): locks that live on the
// driver's other connections stay held.
func TestTerminatedBackendLosesOnlyItsLocks(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	d, locker := openDriver(t, dsn) // the default TTL: no refresh within the test's bound
	// Two locks taken by waiting, each on a connection of its own.
	other := lock.New(mustOpen(t, dsn))
	defer other.Close()
	var held []*lock.Lock
	for i := 0; i < 2; i++ {
		key := fmt.Sprintf("%s/%d", t.Name(), i)
		blocker, err := other.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lock.Lock, 1)
		go func() {
			l, err := locker.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		waitQueued(t, dsn, pgadvisory.LockID(pgadvisory.DefaultPrefix, key), 1)
		if err := blocker.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l := <-got; l != nil {
			held = append(held, l)
		}
	}
	if len(held) != 2 {
		t.FailNow()
	}
	admin := connect(t, dsn)
	var pid int
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, held[0].Key())
	err := admin.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, id).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	// Without a timeout, pg_terminate_backend returns once it has signalled the
	// backend; the backend then exits (releasing its locks) and its socket closes.
	began := time.Now()
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held[0].Lost():
		t.Logf("Lost() closed %v after pg_terminate_backend was sent", time.Since(began).Round(10*time.Microsecond))
	case <-time.After(promptLoss):
		t.Fatalf("Lost() of the lock on the terminated backend did not close within %v", promptLoss)
	}
	if err := held[1].Refresh(ctx); err != nil {
		t.Fatalf("the lock on another connection: %v", err)
	}
	if conns, locks := sessions(t, dsn, d); locks != 1 {
		t.Errorf("%d advisory locks on %d connections after the terminate, want 1", locks, conns)
	}
}

func mustOpen(t testing.TB, dsn string, opts ...pgadvisory.Option) *pgadvisory.Driver {
	t.Helper()
	d, err := pgadvisory.OpenForTest(context.Background(), dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// With every connection the cap allows in use, more waiters do not block on a
// connection (which could deadlock a holder that needs one more lock): the
// driver answers them ErrLocked, the portable layer tries again after its
// backoff, and all are served.
func TestWaitersBeyondTheConnectionCapAreServed(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	d := mustOpen(t, dsn, pgadvisory.WithMaxConns(3))
	locker := lock.New(d)
	defer locker.Close()
	other := lock.New(mustOpen(t, dsn))
	defer other.Close()

	held, err := other.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	// A holder in the capped driver, which will also need a second key that
	// another client holds.
	mine, err := locker.Acquire(ctx, t.Name()+"/mine")
	if err != nil {
		t.Fatal(err)
	}
	busy, err := other.Acquire(ctx, t.Name()+"/second")
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	var inside, served atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := locker.Acquire(ctx, t.Name())
			if err != nil {
				t.Error(err)
				return
			}
			if inside.Add(1) != 1 {
				t.Error("two holders at once")
			}
			inside.Add(-1)
			served.Add(1)
			_ = l.Release(ctx)
		}()
	}
	// Two wait in the server's queue (the cap less the holder's connection);
	// the others try again without a queue place.
	waitQueued(t, dsn, pgadvisory.LockID(pgadvisory.DefaultPrefix, t.Name()), 2)
	if n := pgadvisory.ConnsForTest(d); n > 3 {
		t.Errorf("%d lock connections, above the cap of 3", n)
	}
	// The holder of "mine" now waits for the second key: it must get it once
	// released, although the waiters took every connection they could.
	second := make(chan error, 1)
	go func() {
		l, err := locker.Acquire(ctx, t.Name()+"/second")
		if err == nil {
			err = l.Release(ctx)
		}
		second <- err
	}()
	eventually(t, 10*time.Second, "the holder found the second key held", func() bool {
		return pgadvisory.ContendedForTest(d, t.Name()+"/second")
	})
	if err := busy.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a holder needing one more lock was not served while waiters filled the connections")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if served.Load() != waiters {
		t.Errorf("%d of %d waiters served", served.Load(), waiters)
	}
	if err := mine.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Release checks pg_advisory_unlock's result: a lock the session no longer
// holds is ErrNotHeld (and lost), never a silent success.
func TestReleaseOfALockTheSessionNoLongerHoldsIsErrNotHeld(t *testing.T) {
	ctx := context.Background()
	d, locker := openDriver(t, testserver.Postgres(t))
	l, err := locker.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := pgadvisory.ExecOnLockSessionsForTest(d, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	err = l.Release(ctx)
	if !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release after the session dropped the lock = %v, want ErrNotHeld and ErrLost", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost() still open")
	}
}

// RefreshBatch confirms the locks it is given, with one ping per connection,
// and refuses owners that hold nothing.
func TestRefreshBatchConfirmsHeldLocksAndRefusesOthers(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	d := mustOpen(t, dsn)
	defer d.Close()
	var reqs []*driver.Request
	for i := 0; i < 50; i++ {
		req := &driver.Request{Key: fmt.Sprintf("%s/%d", t.Name(), i), Owner: fmt.Sprintf("owner-%d", i), TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	stranger := &driver.Request{Key: t.Name() + "/0", Owner: "stranger", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	errs := d.RefreshBatch(ctx, append(reqs, stranger))
	for i, err := range errs[:len(reqs)] {
		if err != nil {
			t.Errorf("lock %d: %v", i, err)
		}
	}
	if err := errs[len(reqs)]; !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("a stranger's refresh = %v, want ErrNotHeld", err)
	}
	for _, req := range reqs {
		if err := d.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
}
