package redisdriver_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/redisdriver"
)

// Open a Locker by URL. Any of the forms in the package documentation works
// the same way: redis://, rediss://, redis+unix://, redis+sentinel://,
// redis+cluster://.
func Example() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL")) // e.g. redis://:password@redis.internal:6379/0
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost (expired, deleted, or the
		// server was restarted or failed over).
		return nil
	}, lock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// Lock with a client the program already has. The client stays the caller's:
// close it after the Locker.
func ExampleNew() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"node-1:7000", "node-2:7000", "node-3:7000"},
		ContextTimeoutEnabled: true, // a refresh must not outlive the lock's deadline
	})
	defer client.Close()

	d, err := redisdriver.New(client, redisdriver.WithPrefix("billing"))
	if err != nil {
		log.Fatal(err)
	}
	locker := lock.New(d, lock.WithTTL(10*time.Second))
	defer locker.Close()

	ctx := context.Background()
	l, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	// Pass the token to the resource, which refuses a token lower than the
	// highest it has admitted (equal is admitted: this holder writes again):
	//	UPDATE invoices SET ..., fence = $2 WHERE id = $1 AND fence <= $2
	fmt.Println(l.Token() > 0)
}

// A read-write lock: readers hold the key together, a writer alone; once a
// writer waits, readers that arrive after it wait behind it.
func Example_readWriteLock() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// Many readers at once.
	err = locker.Do(ctx, "catalog", func(ctx context.Context) error {
		return nil // read the catalog
	}, lock.WithShared(true))
	if err != nil {
		log.Fatal(err)
	}
	// One writer, with no reader beside it.
	err = locker.Do(ctx, "catalog", func(ctx context.Context) error {
		return nil // rewrite the catalog
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A counting semaphore: at most three holders of "exports" at once. Every
// user of the key must ask for the same number of permits (another number is
// lock.ErrInvalidArgument).
func Example_semaphore() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	l, err := locker.Acquire(ctx, "exports", lock.WithPermits(3))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	// Each permit has its own fencing token, refresh, release and Lost().
	fmt.Println(l.Token() > 0)
}

// A fenced write to a Redis value: a holder that paused past its TTL cannot
// overwrite what its successor wrote, whether or not it noticed the loss.
func ExampleFenced() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL"), lock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "redis.internal:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	store := redisdriver.Fenced{Client: rdb}

	l, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	// Admitted only if no holder with a larger token has written.
	err = store.HSet(ctx, "invoice:42", l.Token(), "state", "paid", "receipt", "r-1001")
	if errors.Is(err, fence.ErrStale) {
		log.Print("a newer holder of invoice:42 has written; this write was refused")
	} else if err != nil {
		log.Fatal(err)
	}
}
