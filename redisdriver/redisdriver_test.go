package redisdriver

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/faultharness"
	"github.com/distlock/lock/internal/testserver"
)

// TestConformance runs the shared suite against a private redis-server (without
// persistence), which the suite restarts empty between two acquisitions.
func TestConformance(t *testing.T) {
	srv := testserver.StartRedis(t)
	admin := adminClient(t, srv.URL())
	conformance.Run(t, faultharness.With(conformance.Harness{
		// Each client is a driver with its own connections, as a separate
		// process would have.
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return openURL(ctx, srv.URL()) },
		// Redis locks are not bound to a connection: what makes a server forget
		// a client's locks is an operator deleting them (or eviction, or a
		// failover that lost them). Killing the client's connections too makes
		// its pub/sub reconnect, the path on which it checks its locks.
		Sever: func(ctx context.Context, d driver.Driver) error {
			return sever(ctx, admin, d.(*Driver))
		},
		// A deleted key looks like an expired one.
		SeverCause:     lock.ErrExpired,
		AttemptBound:   goRedisReadTimeout, // what bounds one call (scripts.go)
		RestartBackend: func(context.Context) error { return srv.Restart(false) },
		// The run_id changed.
		RestartCause: lock.ErrServerChanged,
		// A holder that hears nothing loses its lock at its validity deadline,
		// before the server expires the key.
		PartitionCause: lock.ErrExpired,
	}, []*testserver.Server{srv}, srv.URL(),
		func(ctx context.Context, u string) (driver.Driver, error) { return openURL(ctx, u) },
		func(context.Context) error { return srv.Restart(false) }, 0))
}

// TestConformanceWithoutFencing runs the shared suite against a driver with
// fencing=false: the fencing properties are skipped (Capabilities.Fencing is
// false) and Token must refuse; every other property holds as with fencing.
func TestConformanceWithoutFencing(t *testing.T) {
	srv := testserver.StartRedis(t)
	admin := adminClient(t, srv.URL())
	u := srv.URL() + "?fencing=false"
	conformance.Run(t, faultharness.With(conformance.Harness{
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return openURL(ctx, u) },
		Sever: func(ctx context.Context, d driver.Driver) error {
			return sever(ctx, admin, d.(*Driver))
		},
		SeverCause:     lock.ErrExpired,
		RestartBackend: func(context.Context) error { return srv.Restart(false) },
		RestartCause:   lock.ErrServerChanged,
	}, []*testserver.Server{srv}, u,
		func(ctx context.Context, u string) (driver.Driver, error) { return openURL(ctx, u) },
		func(context.Context) error { return srv.Restart(false) }, 0))
}

// goRedisReadTimeout is go-redis v9's default ReadTimeout, which the URLs of
// the tests leave as it is.
const goRedisReadTimeout = 5 * time.Second
