package pgadvisory

import (
	"context"
	"fmt"

	"github.com/distlock/lock/driver"
)

// A lock session's statement has no timeout of its own: against a server that
// accepts connections and answers nothing (frozen, or a machine that stalled)
// the kernel keeps acknowledging, TCP keepalives succeed, and a TryAcquire or
// Release with a context that never ends waited for ever. So the driver
// bounds each by connect_timeout, the time it already gives the server to
// answer a new session: past it, the call fails with driver.ErrUnavailable,
// as it would at the caller's own deadline (what the call started is settled
// as after any deadline, see Errors and deadlines).

// attempt returns ctx bounded by the connect timeout, and a function that
// ends it and turns the bound's expiry in err into an error matching
// driver.ErrUnavailable that names the bound (the caller's own deadline or
// cancellation is left as it is).
func (d *Driver) attempt(ctx context.Context) (context.Context, func(err error) error) {
	timeout := d.connectTimeout()
	actx, cancel := context.WithTimeout(ctx, timeout)
	return actx, func(err error) error {
		expired := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || !expired {
			return err
		}
		return fmt.Errorf("%w: pgadvisory: no answer within connect_timeout %v: %w", driver.ErrUnavailable, timeout, err)
	}
}
