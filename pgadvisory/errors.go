package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/lock/driver"
)

// The driver makes one attempt and reports; the portable layer decides whether
// to try again. What the driver tells it is whether a failure is transient:
// such errors are marked with driver.ErrUnavailable, every other one is
// permanent (authentication 28xxx, permission 42501, an unknown database or
// setting, a fencing sequence that cannot be used, a standby, a transaction
// pooler).

// sessionLostError is how the driver learned that a lock session ended. The
// server released the session's locks; for an acquire under way it means only
// that this attempt failed, and a new session may succeed.
// Its cause (why) is the loss cause its locks report: driver.ErrSessionExpired,
// or driver.ErrServerChanged when the driver saw the server's start time change.
type sessionLostError struct{ err, why error }

func (e *sessionLostError) Error() string {
	return "pgadvisory: lock session lost (the server releases its locks): " + e.err.Error()
}

func (e *sessionLostError) Unwrap() []error { return []error{e.err, e.why} }

// errSessionLost wraps the error by which the driver learned that a session ended.
func errSessionLost(err error) error {
	return &sessionLostError{err, driver.ErrSessionExpired}
}

// errServerChanged wraps the error by which the driver learned that the
// server restarted or failed over, which ended a session.
func errServerChanged(err error) error {
	return &sessionLostError{err, driver.ErrServerChanged}
}

// transientCode reports whether a SQLSTATE means the server could not serve the
// request now, so that a later attempt (on a new session) may succeed.
func transientCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"): // connection exception
		return true
	}
	switch code {
	case "57P01", // admin_shutdown: a fast shutdown, or pg_terminate_backend
		"57P02", // crash_shutdown: another backend crashed, the server restarts
		"57P03", // cannot_connect_now: starting up, shutting down, in recovery
		"53300", // too_many_connections: others may disconnect
		"57014", // query_canceled: a late cancel request of an ended wait
		"40001", // serialization_failure
		"40P01": // deadlock_detected
		return true
	}
	return false
}

// transient reports whether err is a failure a later attempt may not meet: the
// server was unreachable, went away, or was not ready.
func transient(err error) bool {
	var sl *sessionLostError
	if errors.As(err, &sl) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server answered: its code decides, whatever else is wrapped.
		return transientCode(pgErr.Code)
	}
	return driver.Unreachable(err) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

// classify marks a transient err with driver.ErrUnavailable and returns every
// other error as it is. Errors that already carry a verdict (a driver
// sentinel) and the caller's own context ending are left alone.
func classify(ctx context.Context, err error) error {
	switch {
	case err == nil,
		errors.Is(err, driver.ErrUnavailable), errors.Is(err, driver.ErrLocked),
		errors.Is(err, driver.ErrNotHeld), errors.Is(err, driver.ErrClosed),
		errors.Is(err, driver.ErrUnsupported), errors.Is(err, driver.ErrInvalidURL),
		errors.Is(err, context.Canceled),
		ctx.Err() != nil && errors.Is(err, ctx.Err()),
		!transient(err):
		return err
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}
