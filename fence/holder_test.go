package fence_test

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/filedriver"
)

// The paused holder process's settings, in its environment.
const (
	holderDirEnv = "FENCE_TEST_HOLDER_DIR" // the file backend's directory
	holderKeyEnv = "FENCE_TEST_HOLDER_KEY" // the key to hold, also the resource name
	holderURLEnv = "FENCE_TEST_HOLDER_URL" // the resource server's URL
)

// runHolder is the paused holder: it takes the lock, prints "token N", waits
// for a line on stdin (the parent stops and continues it meanwhile), and then
// writes to the resource with its token as a holder that checked its lock
// before the pause would, printing "status N".
func runHolder() int {
	ctx := context.Background()
	u := url.URL{Scheme: "file", Path: os.Getenv(holderDirEnv)}
	lk, err := lock.Open(ctx, u.String(), lock.WithTTL(200*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer lk.Close()
	key := os.Getenv(holderKeyEnv)
	l, err := lk.Acquire(ctx, key)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("token %d\n", l.Token())
	if !bufio.NewScanner(os.Stdin).Scan() {
		return 1
	}
	code, body, err := put(ctx, os.Getenv(holderURLEnv), key, l.Token(), "first, after the pause")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("status %d %s", code, body)
	return 0
}
