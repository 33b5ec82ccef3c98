package pgadvisory_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock"
	"github.com/distlock/lock/pgadvisory"
)

// A lock over PostgreSQL, chosen by the URL; the fencing token guards the write
// it protects. (Not run: it needs a server.)
func Example() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "postgres://app@db.example.com/app?sslmode=verify-full&ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	l, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	// A holder that lost the lock (its session ended) has a smaller token than
	// the next one, so its late write changes nothing.
	db, err := pgxpool.New(ctx, "postgres://app@db.example.com/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(ctx, `UPDATE invoices SET state = 'paid', fence = $2 WHERE id = $1 AND fence < $2`, 42, l.Token())
	if err != nil {
		log.Fatal(err)
	}
}

// A program that already has a pool builds the driver from it; the lock
// connections are taken out of the pool for good, so its queries keep their
// capacity. (Not run: it needs a server.)
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	d, err := pgadvisory.New(pool, pgadvisory.WithPrefix("billing"), pgadvisory.WithMaxConns(4))
	if err != nil {
		log.Fatal(err)
	}
	locker := lock.New(d)
	defer locker.Close() // closes the driver, not the pool

	err = locker.Do(ctx, "nightly-report", func(ctx context.Context) error {
		return nil // ctx is cancelled if the lock's session is lost
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The lock id of a key, as psql computes it from the expression in the package
// documentation.
func ExampleLockID() {
	fmt.Println(pgadvisory.LockID(pgadvisory.DefaultPrefix, "invoice:42"))
	// Output: -6942657585546101947
}

// A read-write lock: readers hold the key together; a writer waits for the
// readers ahead of it, and readers that come after it wait behind it, so a
// steady stream of readers never starves it. (Not run: it needs a server.)
func Example_sharedLock() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "postgres://app@db.example.com/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	r, err := locker.Acquire(ctx, "catalog", lock.WithShared(true))
	if err != nil {
		log.Fatal(err)
	}
	// ... read the catalog, beside other readers ...
	if err := r.Release(ctx); err != nil {
		log.Fatal(err)
	}

	w, err := locker.Acquire(ctx, "catalog") // exclusive: no reader holds it meanwhile
	if err != nil {
		log.Fatal(err)
	}
	// ... rewrite the catalog; w.Token() is above every reader's before it ...
	if err := w.Release(ctx); err != nil {
		log.Fatal(err)
	}
}

// A semaphore: at most 3 exports run at once, across every process that uses
// the key with WithPermits(3). Each permit is an advisory lock of its own
// (PermitID), so it is lost and released like a mutex. (Not run: it needs a
// server.)
func Example_semaphore() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "postgres://app@db.example.com/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "exports", func(ctx context.Context) error {
		return nil // one of at most 3 holders; ctx ends if the permit is lost
	}, lock.WithPermits(3))
	if err != nil {
		log.Fatal(err)
	}
}

// The slots of a semaphore, as psql computes them from the expression in the
// package documentation, to find its holders in pg_locks.
func ExamplePermitID() {
	for i := 0; i < 3; i++ {
		fmt.Println(pgadvisory.PermitID(pgadvisory.DefaultPrefix, "exports", i))
	}
	// Output:
	// -1795973351207904475
	// -1683585813372306913
	// -5320403161541834042
}
