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

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

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
	d, err := pgadvisory.Open(context.Background(), urlAt(addr))
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
	d, err = pgadvisory.Open(context.Background(), urlAt(addr)+"&connect_timeout=1")
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
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			const limit = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			begin := time.Now()
			d, err := pgadvisory.Open(ctx, u)
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
			_, err := pgadvisory.Open(ctx, c.url)
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

	before := goleak.IgnoreCurrent()
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
	goleak.VerifyNone(t, before)
}
