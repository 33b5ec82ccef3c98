package filedriver

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	lock "github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// watchdog bounds every wait in these tests: a wait that hits it is a failure,
// not a hang.
const watchdog = 10 * time.Second

func newDriver(t *testing.T, dir string) *Driver {
	t.Helper()
	d, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newReq(key, owner string) *driver.Request {
	return &driver.Request{Key: key, Owner: owner, TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, d *Driver, r *driver.Request) uint64 {
	t.Helper()
	g, err := d.TryAcquire(testCtx(t), r)
	if err != nil {
		t.Fatalf("TryAcquire(%q, %q): %v", r.Key, r.Owner, err)
	}
	return g.Token
}

// blockedHook makes d report on the returned channel each time a waiting Acquire
// is about to block. Call it before any Acquire starts.
func blockedHook(d *Driver) <-chan string {
	ch := make(chan string, 64)
	d.testHookWait = func(key string) {
		select {
		case ch <- key:
		default:
		}
	}
	return ch
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(watchdog):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// The crash tests run a holder in a real child process: the test binary itself,
// re-executed with childDirEnv set, which TestMain turns into runChild.
const (
	childDirEnv = "FILEDRIVER_TEST_CHILD_DIR"
	childKeyEnv = "FILEDRIVER_TEST_CHILD_KEY"
	// childPermitsEnv, if set, makes the child hold one permit of a semaphore
	// of that many.
	childPermitsEnv = "FILEDRIVER_TEST_CHILD_PERMITS"
)

// runChild acquires the key through lock.Open, prints "token N", and holds the
// lock until its standard input closes or it is killed.
func runChild() int {
	ctx := context.Background()
	u := url.URL{Scheme: Scheme, Path: os.Getenv(childDirEnv)}
	lk, err := lock.Open(ctx, u.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer lk.Close()
	var opts []lock.Option
	if p := os.Getenv(childPermitsEnv); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		opts = append(opts, lock.WithPermits(n))
	}
	l, err := lk.Acquire(ctx, os.Getenv(childKeyEnv), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("token %d\n", l.Token())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
