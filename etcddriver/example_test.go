package etcddriver_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/fence"
)

// Open a Locker on an etcd cluster by URL; the blank import of etcddriver (here a
// plain one) registers the etcd and etcds schemes.
func Example_open() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp?ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost.
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Build a driver from a client the program already has. The client stays the
// program's: closing the Locker revokes the driver's leases but leaves the client
// open.
func ExampleNew() {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d, err := etcddriver.New(c, etcddriver.WithPrefix("/myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	locker := lock.New(d, lock.WithTTL(10*time.Second))
	defer locker.Close()

	ctx := context.Background()
	l, err := locker.Acquire(ctx, "report:daily")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	// The token is the create revision of the lock's key: pass it to the
	// resource, or fence writes to etcd itself with Fenced.
	fmt.Println("fencing token", l.Token())
	// The same lock, for etcd's own tools: etcdctl lock <this name>.
	fmt.Println(d.LockPrefix("report:daily"))
}

// A read-write lock: many readers hold the key together; a writer
// (a plain Acquire) holds it alone. Once a writer waits, readers that arrive
// after it wait behind it, so a steady stream of readers cannot starve it.
func Example_shared() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "etcd://127.0.0.1:2379/myapp?ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// Readers: any number at once, never beside the writer.
	err = locker.Do(ctx, "catalog", func(ctx context.Context) error {
		// read the catalog
		return nil
	}, lock.WithShared(true))
	if err != nil {
		log.Fatal(err)
	}

	// The writer: alone. Its token exceeds every reader's before it.
	w, err := locker.Acquire(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Release(ctx)
	fmt.Println("writer's fencing token", w.Token())
}

// A counting semaphore: at most three holders of "render-farm" at once, each
// with its own Lock (own refresh, Lost and release). Every user of the key
// must ask for the same number of permits; another number, or a read or write
// lock on the same key, is lock.ErrInvalidArgument.
func Example_semaphore() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "etcd://127.0.0.1:2379/myapp?ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "render-farm", func(ctx context.Context) error {
		// one of at most three jobs at once; ctx ends if the permit is lost
		return nil
	}, lock.WithPermits(3))
	if errors.Is(err, lock.ErrInvalidArgument) {
		log.Fatal("render-farm is used with another number of permits: ", err)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// Fenced writes to etcd: a holder that paused past its TTL, or whose lease
// was revoked, cannot overwrite what its successor wrote, whether or not it
// noticed the loss.
func ExampleFenced() {
	ctx := context.Background()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d, err := etcddriver.New(c)
	if err != nil {
		log.Fatal(err)
	}
	locker := lock.New(d, lock.WithTTL(10*time.Second))
	defer locker.Close()
	l, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	store := etcddriver.Fenced{KV: c}

	// Admitted only if no holder with a larger token has written the
	// resource "/invoices/42" (its token is kept in TokenKey("/invoices/42")).
	_, err = store.Txn(ctx, "/invoices/42", l.Token(),
		clientv3.OpPut("/invoices/42/state", "paid"),
		clientv3.OpPut("/invoices/42/receipt", "r-1001"))
	if errors.Is(err, fence.ErrStale) {
		log.Print("a newer holder of invoice:42 has written; this write was refused")
	} else if err != nil {
		log.Fatal(err)
	}

	// Or: admitted only while this lock is still held (its key exists).
	_, err = store.TxnIfHeld(ctx, d.LockPrefix("invoice:42"), l.Token(),
		clientv3.OpPut("/invoices/42/state", "shipped"))
	if errors.Is(err, fence.ErrStale) {
		log.Print("the lock on invoice:42 was lost; this write was refused")
	} else if err != nil {
		log.Fatal(err)
	}
}
