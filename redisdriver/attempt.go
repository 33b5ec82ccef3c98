package redisdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
)

// go-redis retries a command whose reply timed out (MaxRetries, 3 by
// default) on another connection, and against a server that accepts
// connections but answers nothing (frozen, overloaded) the new connection's
// handshake waits its own read timeout too: one TryAcquire with a context
// without deadline took two read timeouts and the backoff between them
// (10.3s with go-redis's default of 5s), where one was documented. So the
// driver bounds each TryAcquire, Refresh and Release by the client's read
// timeout, retries included: a retry that fits (a connection reset, answered
// at once on a new connection) still happens, a second wait for silence does
// not.

// attemptTimeout is the read timeout of client after go-redis's defaults,
// which bounds one call; zero when reads are not bounded (read_timeout=-1 or
// -2), and the call is then bounded by its context alone.
func attemptTimeout(client redis.UniversalClient) time.Duration {
	var t time.Duration
	switch c := client.(type) {
	case *redis.Client:
		t = c.Options().ReadTimeout
	case *redis.ClusterClient:
		t = c.Options().ReadTimeout
	}
	return max(t, 0)
}

// attempt returns ctx bounded by the driver's attempt timeout, and a function
// that ends it and turns the bound's expiry in err into an error matching
// driver.ErrUnavailable that names the bound (the caller's own deadline or
// cancellation is left as it is).
func (d *Driver) attempt(ctx context.Context) (context.Context, func(err error) error) {
	if d.attemptTimeout <= 0 {
		return ctx, func(err error) error { return err }
	}
	actx, cancel := context.WithTimeout(ctx, d.attemptTimeout)
	return actx, func(err error) error {
		expired := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || !expired {
			return err
		}
		return fmt.Errorf("%w: redisdriver: no answer within read_timeout %v: %w", driver.ErrUnavailable, d.attemptTimeout, err)
	}
}
