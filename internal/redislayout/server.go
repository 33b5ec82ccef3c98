package redislayout

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"
)

// ParseRunID returns the run_id in a reply of INFO server, and false when it
// has none. A server's run_id is new each time its process starts, so a lock
// whose granting server shows another run_id was granted by a server that
// restarted (perhaps without its data) or was replaced by a failover: both
// drivers count such a lock as lost.
func ParseRunID(info string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			if v = strings.TrimSpace(v); v != "" {
				return v, true
			}
		}
	}
	return "", false
}

// The drivers' inbox is one pub/sub subscription per server, to the driver's
// own channel, on which the scripts announce the locks released or handed to
// its waiters. It is also how a driver sees a server go away and come back:
// when a subscription is confirmed again, the held locks are checked.
const (
	// InboxIdle is how long an inbox reader waits for a message before it
	// pings the server, and then for the answer before it gives the
	// connection up: a connection that fails silently is found within twice
	// that.
	InboxIdle = 15 * time.Second
	// InboxBackoffMax caps the pause between attempts to subscribe again
	// while a server is away; with locks held, it is most of the delay
	// between a server's return and the check that reports the locks it lost.
	InboxBackoffMax = 100 * time.Millisecond
)

// Pause sleeps for t and reports false if ctx ended first: the inbox's
// backoff between attempts, which a driver's Close ends at once.
func Pause(ctx context.Context, t time.Duration) bool {
	timer := time.NewTimer(t)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// IsNetTimeout reports whether err is a network timeout: a read that found
// nothing within its deadline, on a connection that may still be alive.
func IsNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
