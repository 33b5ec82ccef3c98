package redisdriver

import (
	"context"

	"github.com/distlock/lock/driver"
)

// Release deletes the lock if req.Owner holds it, handing it to the first
// waiter, and returns driver.ErrNotHeld if it does not. For an owner still
// queued it gives up the owner's place.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	if err := d.usable(ctx); err != nil {
		return err
	}
	ctx, done := d.attempt(ctx)
	n, err := d.release(ctx, req)
	if err = done(err); err != nil {
		return classify(err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

func (d *Driver) release(ctx context.Context, req *driver.Request) (int64, error) {
	k := d.keys(req.Key)
	var n int64
	var err error
	if s := shape(req); s >= 0 {
		n, err = shapedReleaseScript.Run(ctx, d.client, scriptKeys(k), req.Owner, s).Int64()
	} else {
		// The holders key too: the lock may go to shared or permit waiters.
		call := newHotCall(releaseScript, k)
		call.owner = req.Owner
		call.add(&call.owner)
		n, err = call.run(ctx, d.client, releaseScript).Int64()
	}
	if err != nil {
		return 0, err
	}
	d.forget(req)
	return n, nil
}
