package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/lock/driver"
)

// The one place that decides whether a backend error is worth retrying. Drivers
// make one attempt and report; they mark what only they can recognise as
// transient (a Redis LOADING reply, an etcd leader election) with
// driver.ErrUnavailable, and the portable layer recognises plain network
// failures itself.

// isTransient reports whether err is a backend failure that a later attempt may
// not meet: the backend was unreachable or busy, and the outcome is unknown.
func isTransient(err error) bool {
	// A driver's own per-request deadline counts too (not the caller's, which
	// the callers check before asking).
	return errors.Is(err, ErrUnavailable) || driver.Unreachable(err) || errors.Is(err, context.DeadlineExceeded)
}

// classify makes a driver's error match one of the package's sentinels: an
// error that already matches one is returned unchanged, a transient failure
// (among them a driver's own timeout) is marked ErrUnavailable, a cancellation
// stays as it is, and any other error is marked ErrBackend.
func classify(err error) error {
	switch {
	case err == nil, hasSentinel(err):
		return err
	case isTransient(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, context.Canceled):
		return err
	default:
		return fmt.Errorf("%w: %w", ErrBackend, err)
	}
}

// sentinels are the errors every returned error matches one of.
var sentinels = []error{
	ErrLocked, ErrNotHeld, ErrLost, ErrClosed, ErrInvalidKey, ErrInvalidArgument,
	ErrUnsupported, ErrInvalidURL, ErrUnknownScheme, ErrUnavailable, ErrBackend,
}

func hasSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
