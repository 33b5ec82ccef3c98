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
