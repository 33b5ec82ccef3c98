package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// deadlineSlack is how long past its context a call may return on a loaded
// machine.
const deadlineSlack = 500 * time.Millisecond

// urlAt is a postgres URL for the server (or non-server) at addr.
func urlAt(addr string) string {
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// Open without a deadline does not hang on a server whose SYNs are dropped:
// each connection attempt is bounded by connect_timeout, 10s by default (it
// used to wait about two minutes, pgxpool's own bound, or longer).
func TestOpenWithoutADeadlineGivesUpOnAnUnreachableServer(t *testing.T) {
	addr := testserver.UnreachableAddr(t)
	begin := time.Now()
	d, err := pgadvisory.OpenForTest(context.Background(), urlAt(addr))
	took := time.Since(begin)
	if err == nil {
		_ = d.Close()
		t.Fatal("Open of an unreachable server succeeded")
	}
	if took > 10*time.Second+2*time.Second {
		t.Errorf("Open of an unreachable server without a deadline took %v, want about the 10s default connect timeout", took)
	}
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("Open of an unreachable server = %v, want ErrUnavailable", err)
	}
	t.Logf("gave up after %v: %v", took.Round(time.Millisecond), err)

	// connect_timeout in the URL sets the bound.
	begin = time.Now()
	d, err = pgadvisory.OpenForTest(context.Background(), urlAt(addr)+"&connect_timeout=1")
	if took := time.Since(begin); err == nil || took > time.Second+deadlineSlack {
		t.Errorf("Open with connect_timeout=1 = %v after %v, want an error after about 1s", err, took)
	}
	if err == nil {
		_ = d.Close()
	}
}

// Open honours its context in every step, whatever the server does: SYNs
// dropped (dial), connections accepted but never answered (startup), a frozen
// PostgreSQL (authentication); and it leaves no goroutine behind.
func TestOpenHonoursItsContextAtEveryStep(t *testing.T) {
	frozen := testserver.StartPostgres(t)
	if err := frozen.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Resume() })
	cases := map[string]string{
		"SYN dropped":       urlAt(testserver.UnreachableAddr(t)),
		"never answered":    urlAt(testserver.SilentAddr(t)),
		"frozen PostgreSQL": frozen.URL(),
	}
	for name, u := range cases {
		t.Run(name, func(t *testing.T) {
			defer leakcheck.VerifyNone(t, leakcheck.IgnoreCurrent())
			const limit = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			begin := time.Now()
			d, err := pgadvisory.OpenForTest(ctx, u)
			took := time.Since(begin)
			if err == nil {
				_ = d.Close()
				t.Fatal("Open succeeded")
			}
			if took > limit+deadlineSlack {
				t.Errorf("Open with a %v context returned after %v", limit, took)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, driver.ErrUnavailable) {
				t.Errorf("Open = %v, want context.DeadlineExceeded and ErrUnavailable", err)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// Open checks access: a server that is not there or not ready is
// ErrUnavailable (worth retrying), a refused login or a missing database is
// a permanent error, reported at Open, typed, and without the password.
func TestOpenErrorsSayWhetherToRetry(t *testing.T) {
	const password = "right-Pa55word"
	srv := passwordServer(t, "locker", password)
	admin := connect(t, srv.URL())
	mustExec(t, admin, `CREATE DATABASE closed_db`)
	mustExec(t, admin, `REVOKE CONNECT ON DATABASE closed_db FROM PUBLIC`)
	closedPort := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()
	withDB := func(u, db string) string {
		p, _ := url.Parse(u)
		p.Path = "/" + db
		return p.String()
	}
	cases := []struct {
		name      string
		url       string
		transient bool
		code      string
	}{
		{"connection refused", urlAt(closedPort), true, ""},
		{"wrong password", roleURL(srv, "locker", "wrong-Pa55word"), false, "28P01"},
		{"no such database", withDB(srv.URL(), "no_such_db"), false, "3D000"},
		{"no CONNECT privilege", withDB(roleURL(srv, "locker", password), "closed_db"), false, "42501"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := pgadvisory.OpenForTest(ctx, c.url)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if got := errors.Is(err, driver.ErrUnavailable); got != c.transient {
				t.Errorf("Open = %v: ErrUnavailable %v, want %v", err, got, c.transient)
			}
			var pgErr *pgconn.PgError
			if c.code != "" && (!errors.As(err, &pgErr) || pgErr.Code != c.code) {
				t.Errorf("Open = %v, want SQLSTATE %s", err, c.code)
			}
			if strings.Contains(err.Error(), "Pa55word") {
				t.Errorf("the error shows the password: %v", err)
			}
			t.Logf("%v", err)
		})
	}
}

// Close does not wait for a frozen server (every process stopped): not for a
// wait in the server's queue, not for a refresh in flight, not for pgx's own
// clean-up; it returns within about a second and leaves no goroutine.
func TestCloseDoesNotWaitForAFrozenServer(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartPostgres(t)
	other := lock.New(mustOpen(t, srv.URL()))
	t.Cleanup(func() { _ = srv.Resume(); _ = other.Close() })
	busy, err := other.Acquire(ctx, t.Name()+"/busy")
	if err != nil {
		t.Fatal(err)
	}
	_ = busy

	before := leakcheck.IgnoreCurrent()
	d := mustOpen(t, srv.URL())
	locker := lock.New(d)
	var held []*lock.Lock
	for i := 0; i < 20; i++ {
		l, err := locker.TryAcquire(ctx, fmt.Sprintf("%s/%d", t.Name(), i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := locker.Acquire(ctx, t.Name()+"/busy")
		waited <- err
	}()
	waitQueued(t, srv.URL(), pgadvisory.LockID(pgadvisory.DefaultPrefix, t.Name()+"/busy"), 1)

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	// A refresh in flight with a long context, on the connection that holds
	// the locks; the wait is in flight on another.
	refreshed := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		refreshed <- held[0].Refresh(rctx)
	}()
	eventually(t, 10*time.Second, "a refresh and a wait in flight", func() bool { return pgadvisory.BusyConnsForTest(d) == 2 })

	begin := time.Now()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(begin)
	if took > time.Second {
		t.Errorf("Close with a frozen server took %v, want at most about a second", took)
	}
	t.Logf("Close with a frozen server took %v", took.Round(time.Millisecond))
	for name, ch := range map[string]chan error{"the waiting Acquire": waited, "the refresh": refreshed} {
		select {
		case err := <-ch:
			if err == nil {
				t.Errorf("%s succeeded on a closed driver", name)
			}
		case <-time.After(time.Second):
			t.Errorf("%s did not return within a second of Close", name)
		}
	}
	_ = locker.Close()
	leakcheck.VerifyNone(t, before)
}

// promptAfterCtx is how soon after its context ends a call must return
// against a frozen server. The driver returns at once (well under a
// millisecond on an idle machine); the bound leaves room for a loaded one and
// is far below the second a statement used to be given before its session
// was cut.
const promptAfterCtx = 250 * time.Millisecond

// Every call of the driver returns when its context ends, not when the server
// answers or the session is given up, also on connections it already has:
// a ping (Refresh), an unlock (Release), a try (TryAcquire, Acquire of a free
// key) queued behind one another on the session that holds the locks, and a
// wait in the server's queue on a connection of its own. The statements left
// in flight belong to the driver, whose Close ends them without waiting for
// the server and leaves no goroutine behind.
func TestEveryCallReturnsWhenItsContextEndsAgainstAFrozenServer(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartPostgres(t)
	other := lock.New(mustOpen(t, srv.URL()))
	t.Cleanup(func() { _ = other.Close() })
	t.Cleanup(func() { _ = srv.Resume() }) // runs first
	key := t.Name()
	blocker, err := other.Acquire(ctx, key+"/held")
	if err != nil {
		t.Fatal(err)
	}
	_ = blocker

	before := leakcheck.IgnoreCurrent()
	d := mustOpen(t, srv.URL())
	locker := lock.New(d, lock.WithTTL(time.Minute))
	var held []*lock.Lock
	for i := 0; i < 3; i++ {
		l, err := locker.TryAcquire(ctx, fmt.Sprintf("%s/%d", key, i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	// A wait, cancelled once queued, opens the connection the next wait uses
	// and marks the key as contended, so that the next Acquire of it waits
	// at once.
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := locker.Acquire(wctx, key+"/held")
		waited <- err
	}()
	waitQueued(t, srv.URL(), pgadvisory.LockID(pgadvisory.DefaultPrefix, key+"/held"), 1)
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled wait returned %v", err)
	}
	conns := pgadvisory.ConnsForTest(d)

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	contended := pgadvisory.ContendedForTest(d, key+"/held")
	const limit = 300 * time.Millisecond
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Refresh", held[0].Refresh},
		{"Release", held[1].Release},
		{"TryAcquire", func(ctx context.Context) error {
			_, err := locker.TryAcquire(ctx, key+"/try")
			return err
		}},
		{"Acquire of a free key", func(ctx context.Context) error {
			_, err := locker.Acquire(ctx, key+"/free")
			return err
		}},
		{"Acquire of a held key", func(ctx context.Context) error {
			_, err := locker.Acquire(ctx, key+"/held")
			return err
		}},
	}
	type result struct {
		err  error
		late time.Duration // past the context's deadline
	}
	results := make([]chan result, len(calls))
	start := func(i int) {
		results[i] = make(chan result, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			dl, _ := cctx.Deadline()
			err := calls[i].call(cctx)
			results[i] <- result{err, time.Since(dl)}
		}()
	}
	// The wait first, so that it has the idle connection to itself (a try
	// could take it otherwise); the others then queue on the one that holds
	// the locks.
	start(len(calls) - 1)
	eventually(t, 5*time.Second, "the wait in flight", func() bool { return pgadvisory.BusyConnsForTest(d) == 1 })
	for i := range calls[:len(calls)-1] {
		start(i)
	}
	for i, c := range calls {
		select {
		case r := <-results[i]:
			if r.late > promptAfterCtx {
				t.Errorf("%s returned %v after its context ended, want within %v", c.name, r.late.Round(time.Millisecond), promptAfterCtx)
			}
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("%s = %v, want an error matching context.DeadlineExceeded", c.name, r.err)
			}
			t.Logf("%s returned %v after its context ended: %v", c.name, r.late.Round(100*time.Microsecond), r.err)
		case <-time.After(limit + 5*time.Second):
			t.Fatalf("%s did not return within 5s of its context's end", c.name)
		}
	}
	t.Logf("the held key was contended (waited for at once): %v; connections before the freeze %d, now %d",
		contended, conns, pgadvisory.ConnsForTest(d))

	// The statements still in flight are the driver's: Close ends them
	// without the server, and nothing of the driver's outlives it.
	begin := time.Now()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("Close with statements in flight on a frozen server took %v, want at most about a second", took)
	}
	t.Logf("Close took %v", time.Since(begin).Round(time.Millisecond))
	_ = locker.Close()
	leakcheck.VerifyNone(t, before)
}

// A Release whose context ended before the server answered leaves the lock
// held in the driver's books until the unlock's answer comes; a later Release
// of the same lock then reports that outcome (nil: it was freed) and sends no
// second unlock, which on a session that has since taken the same lock for
// another owner would free that owner's lock.
func TestReleaseRetriedAfterItsContextEndedFreesNoOtherOwnersLock(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartPostgres(t)
	t.Cleanup(func() { _ = srv.Resume() })
	d := mustOpen(t, srv.URL())
	// The server is thawed long before the session would be given up.
	pgadvisory.SetStatementGraceForTest(d, time.Minute)
	locker := lock.New(d, lock.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })
	_, checker := openDriver(t, srv.URL())
	key := t.Name()

	first, err := locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	unansweredRelease(t, srv, first)
	// The unlock, still in flight, is answered now.
	eventually(t, 10*time.Second, "the lock freed by the unlock left in flight", func() bool {
		l, err := checker.TryAcquire(ctx, key)
		if err != nil {
			return false
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return true
	})
	// Another owner of the same process takes the lock, on the same session.
	second, err := locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := pgadvisory.ConnsForTest(d); n != 1 {
		t.Logf("the driver has %d connections; the second owner may be on another session", n)
	}
	if err := first.Release(ctx); err != nil {
		t.Errorf("Release retried after the first one completed in the background = %v, want nil", err)
	}
	if _, err := checker.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire by another client after the retried Release = %v, want ErrLocked: the retry freed the second owner's lock", err)
	}
	if err := second.Refresh(ctx); err != nil {
		t.Errorf("Refresh of the second owner's lock = %v", err)
	}
	select {
	case <-second.Lost():
		t.Error("the second owner's lock was reported lost")
	default:
	}
	if err := second.Release(ctx); err != nil {
		t.Errorf("Release of the second owner's lock = %v", err)
	}

	// When a Refresh learns first that the unlock completed, it reports the
	// lock gone, and the driver keeps nothing of it.
	third, err := locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	unansweredRelease(t, srv, third)
	eventually(t, 10*time.Second, "the lock freed by the unlock left in flight", func() bool {
		l, err := checker.TryAcquire(ctx, key)
		if err != nil {
			return false
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return true
	})
	if err := third.Refresh(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Refresh after the unlock completed in the background = %v, want ErrLost", err)
	}
	if n := pgadvisory.HoldingsForTest(d); n != 0 {
		t.Errorf("the driver keeps %d entries after every lock was released, want 0", n)
	}
}

// unansweredRelease releases l with a short context while srv is frozen, and
// thaws srv once that Release has returned (with an error).
func unansweredRelease(t *testing.T, srv *testserver.Server, l *lock.Lock) {
	t.Helper()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		released <- l.Release(rctx)
	}()
	select {
	case err := <-released:
		if err == nil {
			t.Fatal("Release against a frozen server succeeded")
		}
		t.Logf("Release against a frozen server: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Release with a 100ms context did not return within 5s against a frozen server")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
}

// An acquire whose context ended before the server answered, and which the
// server then grants, gives the lock back: nobody holds it, in the server or
// in the driver's books.
func TestTryAcquireGrantedAfterItsContextEndedLeavesNoLock(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartPostgres(t)
	t.Cleanup(func() { _ = srv.Resume() })
	d := mustOpen(t, srv.URL())
	pgadvisory.SetStatementGraceForTest(d, time.Minute)
	locker := lock.New(d, lock.WithTTL(time.Minute))
	t.Cleanup(func() { _ = locker.Close() })
	_, checker := openDriver(t, srv.URL())
	key := t.Name()
	// The session the try will use.
	warm, err := locker.TryAcquire(ctx, key+"/warm")
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
		l, err := locker.TryAcquire(tctx, key)
		if err == nil {
			_ = l.Release(ctx)
		}
		tried <- err
	}()
	select {
	case err := <-tried:
		if err == nil {
			t.Error("TryAcquire against a frozen server succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TryAcquire with a 100ms context did not return within 5s against a frozen server")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the lock free for another client", func() bool {
		l, err := checker.TryAcquire(ctx, key)
		if err != nil {
			return false
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return true
	})
	if _, locks := sessions(t, srv.URL(), d); locks != 1 {
		t.Errorf("the driver's sessions hold %d advisory locks, want 1 (the warm-up lock)", locks)
	}
	l, err := locker.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire by this driver after the abandoned one = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
