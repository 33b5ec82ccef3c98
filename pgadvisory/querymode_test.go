package pgadvisory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// The driver prepares its own statements in pgx's caching query modes (the
// default) and leaves the others, chosen for proxies that cannot keep prepared
// statements, to pgx. Every statement works in every mode: a try, a wait
// granted by a release, tokens, shared locks, a refresh, and a wait cancelled.
func TestEveryQueryExecModeTakesAndGivesBackLocks(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			url := withParam(t, dsn, "default_query_exec_mode", mode)
			_, a := openDriver(t, url)
			_, b := openDriver(t, url)
			key := t.Name()

			held, err := a.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
				t.Fatalf("TryAcquire of a held key = %v, want ErrLocked", err)
			}
			if err := held.Refresh(ctx); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			got := make(chan *lock.Lock, 1)
			errc := make(chan error, 1)
			go func() {
				l, err := b.Acquire(ctx, key)
				if err != nil {
					errc <- err
					return
				}
				got <- l
			}()
			waitUntilQueued(t, dsn, key)
			if err := held.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			var next *lock.Lock
			select {
			case next = <-got:
			case err := <-errc:
				t.Fatalf("the waiting Acquire: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting Acquire was not granted within 10s of the release")
			}
			if next.Token() <= held.Token() {
				t.Errorf("the next holder's token %d is not above the first's %d", next.Token(), held.Token())
			}

			// A wait that is cancelled leaves the lock to its holder.
			wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = a.Acquire(wctx, key)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire of a held key with a 100ms deadline = %v, want DeadlineExceeded", err)
			}
			if err := next.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}

			r1, err := a.TryAcquire(ctx, key+"/shared", lock.WithShared(true))
			if err != nil {
				t.Fatal(err)
			}
			r2, err := b.TryAcquire(ctx, key+"/shared", lock.WithShared(true))
			if err != nil {
				t.Fatalf("a second shared TryAcquire: %v", err)
			}
			if _, err := a.TryAcquire(ctx, key+"/shared"); !errors.Is(err, lock.ErrLocked) {
				t.Fatalf("an exclusive TryAcquire of a key held shared = %v, want ErrLocked", err)
			}
			for _, l := range []*lock.Lock{r1, r2} {
				if err := l.Release(ctx); err != nil {
					t.Fatalf("releasing a shared lock: %v", err)
				}
			}
			l, err := b.TryAcquire(ctx, key+"/shared")
			if err != nil {
				t.Fatalf("TryAcquire after the shared holders released: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitUntilQueued returns once a session waits in the server's queue for the
// lock of key.
func waitUntilQueued(t *testing.T, dsn, key string) {
	t.Helper()
	admin := connect(t, dsn)
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, key)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
			AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, id).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session queued for %q within 10s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The semaphore's statements (the slots' try and wait, the pg_locks look of a
// full semaphore, the unlock that announces a permit given back) work in
// every query mode too, and without fencing.
func TestEveryQueryExecModeTakesAndGivesBackPermits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol", "exec&fencing=false"} {
		t.Run(mode, func(t *testing.T) {
			mode, fencing, _ := strings.Cut(mode, "&fencing=")
			url := withParam(t, dsn, "default_query_exec_mode", mode)
			if fencing != "" {
				// Without a token the value is an integer, not a bigint.
				url = withParam(t, url, "fencing", fencing)
			}
			_, a := openDriver(t, url, lock.WithPermits(2))
			_, b := openDriver(t, url, lock.WithPermits(2))
			key := t.Name()
			// A slot taken past the first one tried (slot 0 held by an SQL
			// session), twice, so that one of the orders tried starts at
			// slot 0: the grant names the slot the statement took, which
			// the release then gives back.
			sql := connect(t, dsn)
			slot0 := pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 0)
			mustExec(t, sql, `SELECT pg_advisory_lock($1)`, slot0)
			for i := 0; i < 2; i++ {
				l, err := a.TryAcquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release of the permit on slot 1: %v", err)
				}
			}
			mustExec(t, sql, `SELECT pg_advisory_unlock($1)`, slot0)
			var held []*lock.Lock
			for i := 0; i < 2; i++ {
				l, err := a.TryAcquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			if _, err := b.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
				t.Fatalf("TryAcquire of a full semaphore = %v, want ErrLocked", err)
			}
			got := make(chan *lock.Lock, 1)
			errc := make(chan error, 1)
			go func() {
				l, err := b.Acquire(ctx, key)
				if err != nil {
					errc <- err
					return
				}
				got <- l
			}()
			probe := connect(t, dsn)
			eventually(t, 10*time.Second, "the permit request queued on a slot", func() bool {
				return waiters(t, probe, pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 0))+
					waiters(t, probe, pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 1)) > 0
			})
			if err := held[0].Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			select {
			case l := <-got:
				if fencing == "" && l.Token() <= held[1].Token() {
					t.Errorf("token %d of the permit given back not above %d", l.Token(), held[1].Token())
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case err := <-errc:
				t.Fatalf("the waiting Acquire: %v", err)
			}
			if err := held[1].Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
