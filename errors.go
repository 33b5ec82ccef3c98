package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
)

// Sentinel errors. Every error the package returns is an *Error that matches one
// of these with errors.Is, and also matches the backend's own error where there is
// one (errors.As reaches it).
var (
	// ErrLocked is returned by TryAcquire when another owner holds the key.
	ErrLocked = driver.ErrLocked

	// ErrNotHeld is returned by Refresh and Release when the lock is no longer ours:
	// it expired, passed to another owner, or was lost (then ErrLost matches too).
	ErrNotHeld = driver.ErrNotHeld

	// ErrLost is returned by Do when the lock was lost while fn ran, and by Refresh
	// and Release of a lock whose Lost channel has closed.
	ErrLost = errors.New("lock lost")

	// ErrClosed is returned by every call on a Locker after Close, by an Acquire
	// that Close interrupted, and by Refresh and Release of a lock that Close
	// released.
	ErrClosed = driver.ErrClosed

	// ErrInvalidKey is returned for a key that is empty, longer than 1024 bytes,
	// or not valid UTF-8.
	ErrInvalidKey = errors.New("invalid key")

	// ErrInvalidArgument is returned for a nil context, a TTL that is not positive
	// (or below the backend's minimum), or another bad option value: WithPermits
	// below 1, WithShared together with WithPermits, or (where the backend can
	// tell) a number of permits other than the key's other users give.
	ErrInvalidArgument = driver.ErrInvalidArgument

	// ErrUnsupported is returned when a call or option needs something the driver
	// cannot do: shared locks or semaphores on a driver without them, turning automatic refresh
	// off on a session-bound driver, or a fencing token from a driver without
	// fencing.
	ErrUnsupported = driver.ErrUnsupported

	// ErrInvalidURL is returned by Open for a URL that does not parse, has no
	// scheme, or carries a bad value for one of the portable parameters.
	ErrInvalidURL = driver.ErrInvalidURL

	// ErrUnknownScheme is returned by Open when no driver registered the URL's
	// scheme (usually a forgotten blank import of the driver package). Its
	// message names that import for the schemes of this repository's drivers
	// and lists the registered schemes.
	ErrUnknownScheme = errors.New("unknown URL scheme")

	// ErrUnavailable is a transient backend failure: the backend could not be
	// reached or could not serve the request now (connection refused or reset, a
	// timeout, a failover, no quorum). Acquire retries these with backoff until
	// its context ends and then returns the last one together with the
	// context's error; Refresh, Release and TryAcquire return it at once.
	ErrUnavailable = driver.ErrUnavailable

	// ErrBackend is a permanent backend failure: the backend refused the request
	// for a reason that retrying will not fix (authentication, permission, a key
	// of the wrong type, a server configuration the driver cannot work with).
	// errors.As reaches the backend's own error.
	ErrBackend = errors.New("backend error")

	// ErrForceReleased is the cause of a lock lost because an operator freed
	// it with ForceRelease, where the backend can tell: Lock.Err matches it.
	ErrForceReleased = driver.ErrForceReleased

	// ErrExpired is the cause of a lock lost because its validity ran out
	// without a confirmed refresh (Lock.Err and Do's context.Cause match it).
	ErrExpired = driver.ErrExpired

	// ErrTakenOver is the cause of a lock lost because the backend showed
	// another owner holding it.
	ErrTakenOver = driver.ErrTakenOver

	// ErrServerChanged is the cause of a lock lost because the backend server
	// holding it restarted or failed over.
	ErrServerChanged = driver.ErrServerChanged

	// ErrSessionExpired is the cause of a lock lost with the backend session
	// it was bound to (connection, ZooKeeper session, etcd lease).
	ErrSessionExpired = driver.ErrSessionExpired

	// ErrNoLeader is returned by Leader when no one leads the election.
	ErrNoLeader = errors.New("no leader")
)

// Error is the one wrapper around every error the package returns. It names the
// operation and the key; Unwrap yields the sentinel and, where there is one, the
// backend's own error.
type Error struct {
	Op  string // "open", "acquire", "try-acquire", "refresh", "release", "do", "close"
	Key string // empty for operations that are not about one key
	Err error  // the sentinel, possibly joined with the backend's error
}

func (e *Error) Error() string {
	s := "lock: " + e.Op
	if e.Key != "" {
		s += " " + quoteKey(e.Key)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// wrapErr builds an *Error exactly once: an error that already is one is returned
// unchanged.
func wrapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Op: op, Key: key, Err: err}
}

// quoteKey quotes a key for an error message, shortening very long keys.
func quoteKey(k string) string {
	const max = 64
	if len(k) <= max {
		return strconv.Quote(k)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(k[cut]) {
		cut--
	}
	return strconv.Quote(k[:cut]) + "…"
}

// checkContext is the one nil-context check of every call that takes a
// context: a nil one is ErrInvalidArgument, before anything else is done.
func checkContext(ctx context.Context, op, key string) error {
	if ctx == nil {
		return &Error{Op: op, Key: key, Err: fmt.Errorf("%w: nil context", ErrInvalidArgument)}
	}
	return nil
}
