package etcddriver

import (
	"context"

	"github.com/distlock/lock/driver"
)

// Release implements driver.Driver with a plain Delete of our key, as
// concurrency.Mutex's Unlock: the key's name is unique to this request while
// the request is known to the driver, so whatever is at that name is ours (see
// "Why release needs no compare" in the package doc). A delete whose outcome
// is unknown (an error: it may still be applied later, as a delayed or
// retried duplicate) leaves the name reserved for the rest of the lease's
// life, so that no newer request of the same lease can ever be given it and
// then be deleted by that duplicate (etcd issue #22082).
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return err
	}
	e := d.lookupLocked(req)
	if e == nil {
		d.held.Unlock()
		return driver.ErrNotHeld
	}
	state := e.state
	d.held.Unlock()

	resp, err := d.c.Delete(requireLeader(ctx), e.key)
	if err != nil {
		d.held.Lock()
		e.uncertain = true
		d.held.Unlock()
		return d.report(ctx, err)
	}
	d.forget(e)
	if resp.Deleted == 0 || state != stateHeld {
		return driver.ErrNotHeld
	}
	return nil
}
