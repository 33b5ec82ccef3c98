package etcddriver

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distlock/lock/driver"
)

// report is what every method of the driver returns its error through: a
// failure that a later attempt may not meet is marked driver.ErrUnavailable, so
// that the portable layer retries it (it owns the retries; the driver makes one
// attempt). The caller's own cancellation or deadline is returned as it is, and
// anything else is permanent: etcd refused the request (authentication,
// permission, a bad argument, a full database) and will refuse it again.
func (d *Driver) report(ctx context.Context, err error) error {
	switch {
	case err == nil, errors.Is(err, driver.ErrUnavailable), errors.Is(err, driver.ErrClosed):
		return err
	case ctx.Err() != nil && (isContextErr(err) || status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded):
		return err
	case d.isClosed():
		// The client was closed under the call: it ended because of Close.
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	case transient(err):
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return err
}

// requireLeader marks the requests made under ctx to be refused at once, with
// "no leader", by a member that has no leader (lost its quorum, or an election
// is under way), rather than left waiting for one: a linearizable read would
// otherwise wait until the caller's context ends (the client retries it), and a
// write for etcd's request timeout (7s by default). The portable layer then
// retries, possibly through another member. Serializable reads are refused too,
// so a member cut off from the others never answers from stale state.
func requireLeader(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

// transient reports whether err says that etcd could not serve the request now
// rather than that it refused it.
func transient(err error) bool {
	switch {
	case errors.Is(err, errSessionEnded), errors.Is(err, errLeaseLostWaiting), errors.Is(err, errKeyGone):
		// Our lease or queued key ended (its keepalives did not get through
		// in time, or an operator revoked it); a new attempt starts on a new
		// lease.
		return true
	case errors.Is(err, rpctypes.ErrTooManyRequests), errors.Is(err, rpctypes.ErrNotLeader):
		// An overloaded server, or a request that reached a member while the
		// leadership moved.
		return true
	}
	// etcd's own errors: "no leader", "leader changed", "request timed out"
	// (also "... possibly due to previous leader failure / connection lost"),
	// "server stopped", "unhealthy cluster" all carry codes.Unavailable.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			// gRPC's connection errors: refused, reset, closed, keepalive
			// timeout, no address available.
			return true
		case codes.Unknown:
			// The server's own deadline for the request passed (etcd returns
			// its context's error as is).
			return s.Message() == context.DeadlineExceeded.Error()
		}
		return false
	}
	// One of the driver's own bounds on a request (the caller's deadline is
	// handled before).
	return errors.Is(err, context.DeadlineExceeded)
}
