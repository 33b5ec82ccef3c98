package etcddriver_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/faultharness"
	"github.com/distlock/lock/internal/testserver"
)

func TestConformance(t *testing.T) { runConformance(t) }

// The suite again with every refresh confirmed through the prefix watch
// (refreshwatch.go) where it covers the lock, as a Driver holding many locks
// confirms them: freezes, restarts and partitions end or stall the watch.
func TestConformanceWithWatchedRefresh(t *testing.T) {
	defer etcddriver.SetWatchThreshold(1)()
	runConformance(t)
}

func runConformance(t *testing.T) {
	srv := testserver.StartEtcd(t) // private: the fault properties freeze and restart it
	base := srv.URL()
	admin := newClient(t, base)
	// After a restart the admin client reconnects on its own (etcd's client
	// balancer does not wait for a request); it reconnects here, before the
	// hook returns, so that its new transport is not taken for a goroutine the
	// property leaked.
	restart := func(ctx context.Context) error {
		if err := srv.Restart(true); err != nil {
			return err
		}
		_, err := admin.Get(ctx, "/distlock-conformance-warmup")
		return err
	}
	// Connect the admin client now: its gRPC transport goroutines must exist before
	// the suite's per-property leak check takes its snapshot.
	if _, err := admin.Get(context.Background(), "/distlock-conformance-warmup"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base + "/distlock-conformance")
	if err != nil {
		t.Fatal(err)
	}
	open, _ := driver.Lookup(etcddriver.Scheme)
	conformance.Run(t, faultharness.With(conformance.Harness{
		RestartLosesTokens: true, // the server comes back wiped
		// Each client is a Driver opened from the URL, with its own etcd client and
		// leases, as a separate process would have; closing it closes the client.
		NewDriver: func(ctx context.Context) (driver.Driver, error) {
			return open(ctx, driver.Config{URL: u})
		},
		// Revoking a client's leases is what etcd does when its keepalives stop.
		Sever:      func(ctx context.Context, d driver.Driver) error { return sever(ctx, admin, d) },
		SeverCause: lock.ErrSessionExpired,
		// gRPC's keepalive declares a silent connection dead.
		AttemptBound:   etcddriver.DefaultKeepaliveTime + etcddriver.DefaultKeepaliveTimeout,
		RestartBackend: restart,
		// A server back without its data has forgotten the lease.
		RestartCause: lock.ErrSessionExpired,
		// No keepalive is confirmed within the lease's TTL (or the lock's
		// validity deadline passes first): expiry, not the lease's end, which
		// the cut-off client cannot hear.
		PartitionCause: lock.ErrExpired,
	}, []*testserver.Server{srv}, u.String(),
		func(ctx context.Context, raw string) (driver.Driver, error) {
			u, err := url.Parse(raw)
			if err != nil {
				return nil, err
			}
			return open(ctx, driver.Config{URL: u})
		},
		// Leases survive a restart that keeps the data; a server that lost it
		// (a replaced machine) has forgotten them and the locks. The admin
		// client reconnects before the hook returns, so that its new transport
		// is not taken for a goroutine the property leaked.
		func(ctx context.Context) error {
			if err := srv.Restart(false); err != nil {
				return err
			}
			_, err := admin.Get(ctx, "/distlock-conformance-warmup")
			return err
		}, 0))
}
