package contestants

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock/bench/harness"
)

func postgresContestants(url string, srv *harness.Server) []*harness.Contestant {
	return []*harness.Contestant{
		oursContestant(Postgres, url, srv, true),
		rawPostgresContestant(url, srv),
		rawPostgresSemContestant(url, srv),
	}
}

// postgresServer describes a PostgreSQL server: its port and the transactions
// it has committed or rolled back (each statement outside a transaction is
// one), from pg_stat_database.
func postgresServer(url string) (*harness.Server, error) {
	_, ports, err := hostAndPorts(url)
	if err != nil {
		return nil, err
	}
	return &harness.Server{Ports: ports, Requests: func(ctx context.Context) (int64, error) {
		pool, err := rawPool(ctx, url, 1)
		if err != nil {
			return 0, err
		}
		defer pool.Close()
		// The counters of other sessions reach pg_stat_database when those
		// flush their statistics (at most once a second while busy):
		// over a window of seconds the figure is right to about a second.
		var n int64
		err = pool.QueryRow(ctx, `SELECT sum(xact_commit + xact_rollback)::bigint FROM pg_stat_database`).Scan(&n)
		return n, err
	}}, nil
}

func rawPool(ctx context.Context, url string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// rawPostgres is the floor: session advisory locks on a pool connection
// pinned for as long as the lock is held, pg_try_advisory_lock (one attempt)
// or pg_advisory_lock (the server's own wait queue), then pg_advisory_unlock.
// Keys map to lock ids by FNV-1a. No fencing. Its read-write lock is the same
// with pg_advisory_lock_shared for readers: the server's lock manager queues
// both kinds.
type rawPostgres struct{ pool *pgxpool.Pool }

func rawPostgresContestant(url string, srv *harness.Server) *harness.Contestant {
	return &harness.Contestant{
		Backend: Postgres, Name: floorName, Setting: "pg_advisory_lock on pinned connections", Role: harness.Floor,
		TryUncontended: true, Server: srv,
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			// Enough connections for every goroutine of the distinct-keys
			// scenario to pin one.
			pool, err := rawPool(ctx, url, 8)
			if err != nil {
				return nil, err
			}
			return rawPostgres{pool}, nil
		},
		NA: map[harness.Scenario]string{
			harness.Held:      "a lock pins its connection here, so 10,000 locks would need 10,000 connections",
			harness.Semaphore: "advisory locks have no counting form; the n-slot semaphore recipe is a row of its own",
		},
	}
}

func lockID(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int64(h.Sum64())
}

func (r rawPostgres) Acquire(ctx context.Context, key string) (harness.Release, error) {
	return r.take(ctx, key, `SELECT true FROM pg_advisory_lock($1)`, unlockSQL)
}

const (
	unlockSQL       = `SELECT pg_advisory_unlock($1)`
	unlockSharedSQL = `SELECT pg_advisory_unlock_shared($1)`
)

// AcquireRW waits in pg_advisory_lock_shared (a reader) or pg_advisory_lock
// (a writer).
func (r rawPostgres) AcquireRW(ctx context.Context, key string, shared bool) (harness.Release, error) {
	if shared {
		return r.take(ctx, key, `SELECT true FROM pg_advisory_lock_shared($1)`, unlockSharedSQL)
	}
	return r.Acquire(ctx, key)
}

func (r rawPostgres) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	return r.take(ctx, key, `SELECT pg_try_advisory_lock($1)`, unlockSQL)
}

// take runs query (true: taken) on a pinned connection.
func (r rawPostgres) take(ctx context.Context, key, query, unlock string) (harness.Release, error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	id := lockID(key)
	var ok bool
	if err := conn.QueryRow(ctx, query, id).Scan(&ok); err != nil {
		conn.Release()
		return nil, err
	}
	if !ok {
		conn.Release()
		return nil, harness.ErrBusy
	}
	return func(ctx context.Context) error {
		defer conn.Release()
		_, err := conn.Exec(ctx, unlock, id)
		return err
	}, nil
}

// rawPostgresSem is the raw semaphore recipe for advisory locks (the one issue
// #19 names for our driver too): n consecutive lock ids per semaphore, a
// caller trying pg_try_advisory_lock on each in turn from a random one, on a
// connection pinned while it holds, and trying again after 1 ms when all n are
// taken. PostgreSQL has no counting lock, so there is nothing to wait in.
type rawPostgresSem struct {
	noTry
	pool *pgxpool.Pool
}

func rawPostgresSemContestant(url string, srv *harness.Server) *harness.Contestant {
	na := shapeOnlyNA("a semaphore recipe only")
	na[harness.ReadHeavy] = "a semaphore recipe; the read-write floor is pg_advisory_lock_shared, above"
	return &harness.Contestant{
		Backend: Postgres, Name: "raw semaphore", Setting: "n advisory ids, 1 ms retry", Role: harness.Floor,
		Server: srv, NA: na,
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			pool, err := rawPool(ctx, url, 8)
			if err != nil {
				return nil, err
			}
			return rawPostgresSem{pool: pool}, nil
		},
	}
}

func (r rawPostgresSem) Acquire(context.Context, string) (harness.Release, error) {
	return nil, fmt.Errorf("%w: a semaphore recipe only", harness.ErrUnsupported)
}

func (r rawPostgresSem) AcquirePermit(ctx context.Context, key string, permits int) (harness.Release, error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	base, first := lockID(key), rand.IntN(permits)
	var id int64
	err = poll(ctx, func() (bool, error) {
		for i := range permits {
			id = base + int64((first+i)%permits)
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	})
	if err != nil {
		conn.Release()
		return nil, err
	}
	return func(ctx context.Context) error {
		defer conn.Release()
		_, err := conn.Exec(ctx, unlockSQL, id)
		return err
	}, nil
}

func (r rawPostgresSem) Close() error { r.pool.Close(); return nil }

func (r rawPostgres) Close() error { r.pool.Close(); return nil }

// PostgresVersion returns the server's version, for the report.
func PostgresVersion(ctx context.Context, url string) string {
	pool, err := rawPool(ctx, url, 1)
	if err != nil {
		return "PostgreSQL (version unknown)"
	}
	defer pool.Close()
	var v string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "PostgreSQL (version unknown)"
	}
	return "PostgreSQL " + v
}
