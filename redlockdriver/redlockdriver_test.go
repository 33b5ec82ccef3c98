package redlockdriver

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/faultharness"
	"github.com/distlock/lock/internal/testserver"
)

// TestConformance runs the shared suite against five private redis-servers
// (without persistence).
func TestConformance(t *testing.T) {
	servers := testserver.RedisServers(t, 5)
	admin := admins(t, servers)
	u := redlockURL(servers)
	conformance.Run(t, faultharness.With(conformance.Harness{
		NewDriver: func(ctx context.Context) (driver.Driver, error) {
			d, err := openURL(ctx, u)
			if err != nil {
				return nil, err
			}
			return track(d), nil
		},
		// A Redlock lock is bound to no connection: what makes the servers
		// forget it is an operator deleting it, and it is gone once a majority
		// forgot it. Sever deletes it on three of the five servers.
		Sever: func(ctx context.Context, d driver.Driver) error {
			t := d.(*tracked)
			t.settle() // the locks' last servers have answered
			return deleteOwned(ctx, admin[:3], t.locks())
		},
		// Deleted keys look like expired ones.
		SeverCause:   lock.ErrExpired,
		AttemptBound: DefaultServerTimeout, // one call is one round
		// The check on the servers' return finds a majority forgot it.
		RestartCause: lock.ErrServerChanged,
		// A holder that hears nothing loses its lock at its validity deadline,
		// before the servers expire the key.
		PartitionCause: lock.ErrExpired,
		// Restart every server, keeping what it saved.
		RestartBackend: func(context.Context) error {
			var errs []error
			for _, s := range servers {
				errs = append(errs, s.Restart(true))
			}
			return errors.Join(errs...)
		},
	}, servers, u,
		func(ctx context.Context, u string) (driver.Driver, error) { return openURL(ctx, u) },
		// A majority of the servers come back empty: enough for another
		// client to take the lock, which the holder must learn.
		func(context.Context) error {
			var errs []error
			for _, s := range servers[:3] {
				errs = append(errs, s.Restart(false))
			}
			return errors.Join(errs...)
		}, 0))
}
