package lock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// The one place that decides whether a backend error is worth retrying. Drivers
// make one attempt and report; they mark what only they can recognise as
// transient (a Redis LOADING reply, an etcd leader election) with
// driver.ErrUnavailable, and the portable layer recognises plain network
// failures itself.

// isTransient reports whether err is a backend failure that a later attempt may
// not meet: the backend was unreachable or busy, and the outcome is unknown.
func isTransient(err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	// A driver's own per-request deadline (not the caller's, which the callers
	// check before asking).
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
