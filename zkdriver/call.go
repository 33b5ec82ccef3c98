package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// go-zookeeper's calls take no context: one blocks until the server answers,
// the connection drops (after 2/3 of the session timeout without a word from a
// hung server) or the connection is closed. call runs such a call on one of
// the driver's workers (kit.Run) so the caller can give up when its context
// ends; the worker finishes the call when go-zookeeper returns, and then runs
// abandoned, if the caller had given up, so that a create that succeeded after
// all is not forgotten.

// call runs op and returns its result, or ctx's error (a *kit.GaveUpError
// once op is under way) if ctx ends first; abandoned, if not nil, gets op's
// result when its caller gave up. (An answer is no evidence that the
// ensemble's leader heard of the session: a server cut off from it answers
// reads for a while. Only the heartbeat chain and handshakes move the
// session's credit; see session.go.)
func call[T any](d *Driver, ctx context.Context, op func() (T, error), abandoned func(T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	return kit.Run(&d.calls, ctx, 0, func(h *kit.Handoff[T]) (T, error) {
		v, err := op()
		if !h.Deliver() && abandoned != nil {
			abandoned(v, err)
		}
		return v, err
	})
}

// maxWorkers bounds the goroutines kept for running calls (kit.Calls.Workers).
// They live as long as the driver, so a call costs a hand-over instead of a
// new goroutine (whose stack would have to grow into go-zookeeper's on every
// call); calls beyond this many at once get a goroutine of their own.
const maxWorkers = 16

// ambiguous reports whether a write that failed with err may nevertheless have
// been applied: the request was sent and the connection dropped before the
// reply came.
func ambiguous(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// transient reports whether err may go away once the client reconnects: the
// connection dropped or could not be made, the request or connection timed
// out, the session moved to another server or expired under the request (the
// client goes on in a new one). Answers of the server about the request (no
// node, no auth, bad arguments) and the caller's own context are not.
func transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, driver.ErrUnavailable),
		errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrSessionMoved), errors.Is(err, zk.ErrSessionExpired):
		return true
	}
	if code, ok := serverCode(err); ok {
		return code == codeConnectionLoss || code == codeOperationTimeout
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// unavailable marks a transient err with driver.ErrUnavailable, so that the
// portable layer retries the call; any other error is returned as it is, and
// the portable layer takes it as permanent.
func unavailable(err error) error {
	if !transient(err) || errors.Is(err, driver.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

// ZooKeeper's system error codes (KeeperException.Code) that go-zookeeper has
// no error value for: it reports them as "unknown error: <code>".
const (
	codeConnectionLoss   = -4
	codeOperationTimeout = -7
)

// serverCode returns the code of an error go-zookeeper made from a server
// code it has no error value for, wherever it is in err's chain.
func serverCode(err error) (int, bool) {
	if rest, ok := strings.CutPrefix(err.Error(), "unknown error: "); ok {
		if n, err := strconv.Atoi(rest); err == nil {
			return n, true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			return serverCode(e)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if n, ok := serverCode(e); ok {
				return n, true
			}
		}
	}
	return 0, false
}
