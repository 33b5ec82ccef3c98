package filedriver_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/filedriver" // registers file://
)

// Two clients of one lock directory, as two processes of one host would be: the
// second finds the lock held, then takes it with a higher fencing token.
func Example() {
	dir, err := os.MkdirTemp("", "filedriver-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	lockURL := (&url.URL{Scheme: "file", Path: dir}).String() // file:///tmp/filedriver-example...
	ctx := context.Background()

	first, err := lock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer first.Close()
	second, err := lock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close()

	l, err := first.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holds it with token", l.Token())

	_, err = second.TryAcquire(ctx, "nightly-report")
	fmt.Println("second finds it held:", errors.Is(err, lock.ErrLocked))

	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	l2, err := second.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer l2.Release(ctx)
	fmt.Println("second holds it with token", l2.Token())
	// Output:
	// first holds it with token 1
	// second finds it held: true
	// second holds it with token 2
}

// A read-write lock and a semaphore on lock files: readers share a key, a
// writer waits for them (and readers arriving while it waits wait behind it),
// and a semaphore admits two holders at once.
func Example_shapes() {
	dir, err := os.MkdirTemp("", "filedriver-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	locker, err := lock.Open(ctx, (&url.URL{Scheme: "file", Path: dir}).String())
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	shared := lock.WithShared(true)
	r1, err := locker.Acquire(ctx, "config", shared)
	if err != nil {
		log.Fatal(err)
	}
	r2, err := locker.Acquire(ctx, "config", shared)
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryAcquire(ctx, "config")
	fmt.Println("writer while two readers hold:", errors.Is(err, lock.ErrLocked))
	r1.Release(ctx)
	r2.Release(ctx)
	w, err := locker.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer's token fences the readers:", w.Token() > r1.Token() && w.Token() > r2.Token())
	w.Release(ctx)

	two := lock.WithPermits(2)
	a, err := locker.Acquire(ctx, "exports", two)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := locker.Acquire(ctx, "exports", two)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Release(ctx)
	_, err = locker.TryAcquire(ctx, "exports", two)
	fmt.Println("third export while two run:", errors.Is(err, lock.ErrLocked))
	_, err = locker.TryAcquire(ctx, "exports", lock.WithPermits(3))
	fmt.Println("another number of permits:", errors.Is(err, lock.ErrInvalidArgument))
	// Output:
	// writer while two readers hold: true
	// writer's token fences the readers: true
	// third export while two run: true
	// another number of permits: true
}
