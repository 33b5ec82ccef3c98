package zkdriver_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/zkdriver"
)

// Open a Locker on a ZooKeeper ensemble by URL, and run a job under its lock.
// (These examples need a server, so they are compiled but not run.)
func Example() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/services/billing?session_timeout=15s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: the session expired, or it was
		// cut off from the ensemble for too long.
		return chargeInvoice(ctx, 42)
	})
	if err != nil {
		log.Print(err)
	}
}

func chargeInvoice(context.Context, int) error { return nil }

// A program that already has a go-zookeeper connection builds the driver from
// it, and says which session timeout it asked for.
func ExampleNew() {
	const sessionTimeout = 10 * time.Second
	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, sessionTimeout)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	d, err := zkdriver.New(conn, zkdriver.WithPrefix("billing"), zkdriver.WithSessionTimeout(sessionTimeout))
	if err != nil {
		log.Fatal(err)
	}
	locker := lock.New(d, lock.WithTTL(sessionTimeout))
	defer locker.Close()

	ctx := context.Background()
	l, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println("fencing token:", l.Token())
}

// The driver's locks are Curator's and go-zookeeper's: a zk.Lock on the
// driver's lock path (or a Java InterProcessMutex on it) excludes the driver's
// holders and is excluded by them.
func ExampleDriver_LockPath() {
	conn, _, err := zk.Connect([]string{"zk1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	d, err := zkdriver.New(conn)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	peer := zk.NewLock(conn, d.LockPath("invoice:42"), zk.WorldACL(zk.PermAll))
	if err := peer.Lock(); err != nil { // waits for the driver's holder, if any
		log.Fatal(err)
	}
	defer peer.Unlock()
	fmt.Println(d.LockPath("invoice:42")) // /distlock/invoice:42
}

// Readers share a key and a writer has it alone, with Curator's
// InterProcessReadWriteLock layout: a writer that waits holds back the readers
// that come after it. With exclusive=write in the URL, the exclusive lock is
// Curator's write lock, so Java services using InterProcessReadWriteLock on
// the same path take part too.
func Example_sharedLock() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/app?exclusive=write")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// Many readers at once.
	err = locker.Do(ctx, "catalog", func(ctx context.Context) error {
		return readCatalog(ctx)
	}, lock.WithShared(true))
	if err != nil {
		log.Print(err)
	}

	// One writer, once the readers ahead of it are done.
	w, err := locker.Acquire(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Release(ctx)
	fmt.Println("writer's token fences every reader before it:", w.Token())
}

func readCatalog(context.Context) error { return nil }

// A semaphore of 4 permits, laid out as Curator's InterProcessSemaphoreV2: at
// most four holders at once, each with its own lock (Lost, refresh, release);
// Curator's leases on the same path count against the same 4.
func Example_semaphore() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/app")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// Every user of the key must ask for the same number of permits.
	err = locker.Do(ctx, "encoder-slots", func(ctx context.Context) error {
		return encodeVideo(ctx)
	}, lock.WithPermits(4))
	if err != nil {
		log.Print(err)
	}
}

func encodeVideo(context.Context) error { return nil }
