package redlockdriver_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/redlockdriver"
)

// Open a Locker over three independent servers, each with its own password
// and TLS setting, and run a function under the lock.
func Example() {
	ctx := context.Background()
	// e.g. redlock://?server=redis://:pw1@10.0.0.1:6379/0&server=rediss://:pw2@10.0.0.2:6380/0&server=redis://:pw3@10.0.0.3:6379/0
	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: a majority of the servers no
		// longer hold it, or no refresh reached a majority in time.
		// Redlock gives no fencing token (l.Token() is an error): a resource
		// that must reject a stale holder needs etcd, ZooKeeper or PostgreSQL.
		return nil
	}, lock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// Lock with clients the program already has, one per independent server. The
// clients stay the caller's: close them after the Locker.
func ExampleNew() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		c := redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true, // the per-server timeout interrupts a silent server
		})
		defer c.Close()
		clients = append(clients, c)
	}
	d, err := redlockdriver.New(clients, redlockdriver.WithPrefix("billing"), redlockdriver.WithServerTimeout(20*time.Millisecond))
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
	// Work while watching l.Lost().
}

// Take a shared (read) lock: many readers hold the key at once, a writer
// (locker.Acquire without WithShared) alone. Once a writer waits, readers
// that arrive after it wait behind it, so a stream of readers cannot starve
// it. Semaphores (WithPermits above 1) are ErrUnsupported on Redlock.
func Example_shared() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL")) // redlock://?server=...&server=...&server=...
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "price-list", func(ctx context.Context) error {
		// Read the price list; writers are kept out until every reader
		// released. ctx is cancelled if the hold is lost.
		return nil
	}, lock.WithShared(true), lock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}
