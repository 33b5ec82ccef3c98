package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// A driver built on the program's pool takes its lock connections out of it for
// good: the pool keeps its full capacity for queries while locks are held and
// waited for, no pooled connection ever holds a lock, and closing the driver
// leaves the pool open.
func TestDriverOnAPoolLeavesThePoolItsCapacity(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d, err := pgadvisory.New(pool, pgadvisory.WithPrefix(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	locker := lock.New(d)
	other := lock.New(mustOpen(t, dsn, pgadvisory.WithPrefix(t.Name())))
	defer other.Close()

	// Locks held, one taken by waiting (so on a second lock connection), and a
	// waiter in the queue: three lock connections.
	var held []*lock.Lock
	for i := 0; i < 100; i++ {
		l, err := locker.TryAcquire(ctx, t.Name()+"/"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	blocker, err := other.Acquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan *lock.Lock, 1)
	go func() {
		l, err := locker.Acquire(ctx, "busy")
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	waitQueued(t, dsn, pgadvisory.LockID(t.Name(), "busy"), 1)

	// The pool still has both its connections for the program, and none of
	// the pool's connections holds an advisory lock.
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var conns []*pgxpool.Conn
	for i := 0; i < 2; i++ {
		c, err := pool.Acquire(qctx)
		if err != nil {
			t.Fatalf("pool.Acquire #%d while the driver holds and waits: %v", i+1, err)
		}
		conns = append(conns, c)
		var n int
		if err := c.QueryRow(qctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'`).Scan(&n); err != nil || n != 0 {
			t.Errorf("a pool connection holds %d advisory locks (%v)", n, err)
		}
	}
	for _, c := range conns {
		c.Release()
	}
	if err := blocker.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-waited; l != nil {
		held = append(held, l)
	}
	if _, locks := sessions(t, dsn, d); locks != len(held) {
		t.Errorf("the server shows %d advisory locks of the driver, want %d", locks, len(held))
	}
	if err := locker.Close(); err != nil {
		t.Fatal(err)
	}
	if _, locks := sessions(t, dsn, d); locks != 0 {
		t.Errorf("%d advisory locks left after Close", locks)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the pool after the driver closed: %v", err)
	}
}

// Settings in the URL that would end a wait or an idle holding session do not
// apply to lock sessions; other settings still reach the server.
func TestLockSessionsIgnoreTimeoutsThatWouldEndThem(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	u := withParam(t, dsn, "statement_timeout", "100ms")
	u = withParam(t, u, "lock_timeout", "50ms")
	u = withParam(t, u, "idle_session_timeout", "200ms")
	d, locker := openDriver(t, u)
	other := lock.New(mustOpen(t, dsn))
	defer other.Close()
	admin := connect(t, dsn)
	// past reports whether every session of d in the given state has been
	// in it for longer than age, by the server's clock.
	past := func(state string, age time.Duration) func() bool {
		return func() bool {
			var n, old int
			err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE now() - state_change > $3 * interval '1 millisecond')
				FROM pg_stat_activity WHERE application_name = $1 AND state = $2`,
				d.ApplicationName(), state, age.Milliseconds()).Scan(&n, &old)
			if err != nil {
				t.Error(err)
				return true
			}
			return n > 0 && old == n
		}
	}

	held, err := locker.Acquire(ctx, t.Name()+"/held")
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := other.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := locker.Acquire(ctx, t.Name())
		got <- result{l, err}
	}()
	// The wait runs past both timeouts before the lock is released.
	eventually(t, 10*time.Second, "the wait running for 300ms", past("active", 300*time.Millisecond))
	if err := blocker.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("a wait longer than the URL's statement_timeout and lock_timeout: %v", r.err)
	}
	l := r.l
	eventually(t, 10*time.Second, "the sessions idle for 400ms", past("idle", 400*time.Millisecond))
	for _, x := range []*lock.Lock{held, l} {
		if err := x.Refresh(ctx); err != nil {
			t.Errorf("a lock session idle past the URL's idle_session_timeout: %v", err)
		}
		if err := x.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}
