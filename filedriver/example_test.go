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
