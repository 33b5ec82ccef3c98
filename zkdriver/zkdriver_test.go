package zkdriver_test

import (
	"context"
	"testing"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// The whole suite against a private ZooKeeper that reaps empty key nodes every
// 100 ms, so that key nodes vanish under the driver between locks, as they do
// in production a minute after a key was last used.
func TestConformance(t *testing.T) {
	fastReaper(t)
	srv := testserver.StartZooKeeper(t)
	url := srv.URL() + "?session_timeout=4s"
	conformance.Run(t, conformance.Harness{
		// Each client is a Driver of its own: its own connection and session,
		// as a separate process would have.
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return openDriver(ctx, url) },
		// A session expiry: the server deletes the session's nodes while the
		// client lives on.
		Sever:          severer(srv.Addr()),
		RestartBackend: func(context.Context) error { return srv.Restart(true) },
	})
}
