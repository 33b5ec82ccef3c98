package filedriver

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/distlock/lock/driver"
)

// Refresh confirms that req.Owner still holds req.Key: its descriptor is open
// (so the flock is ours) and the lock file at the key's path is still the file it
// locked. A lock file deleted or replaced behind our back means another process
// can lock the new file, so that is driver.ErrNotHeld, and the lock is dropped.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k := holdKey{req.Key, req.Owner}
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return err
	}
	h := d.held.GetLocked(k)
	var f *os.File
	if h != nil {
		f = h.f
	}
	d.held.Unlock()
	if h == nil {
		return driver.ErrNotHeld
	}
	if f == nil {
		d.drop(k, h, false)
		return errSevered
	}
	same, err := samePath(f, h.path)
	switch {
	case errors.Is(err, os.ErrClosed): // severed while we looked
		d.drop(k, h, false)
		return errSevered
	case err != nil:
		return err
	case !same:
		forced := h.dir != "" && evicted(h.dir, h.id)
		d.drop(k, h, true)
		if forced {
			return fmt.Errorf("%w: %w: lock file %s was replaced", driver.ErrNotHeld, driver.ErrForceReleased, h.path)
		}
		return fmt.Errorf("%w: %w: lock file %s was deleted or replaced", driver.ErrNotHeld, driver.ErrTakenOver, h.path)
	}
	return nil
}

// errSevered: the descriptor, the client's hold on the flock, is gone as a
// session is.
var errSevered = fmt.Errorf("%w: %w: the lock file descriptor was closed", driver.ErrNotHeld, driver.ErrSessionExpired)

// drop forgets h and closes its descriptor, if it is still the lock of k;
// replaced: its lock file was found replaced.
func (d *Driver) drop(k holdKey, h *holding, replaced bool) {
	d.held.Lock()
	d.held.ForgetLocked(k, h)
	files := h.detach()
	d.held.Unlock()
	h.end(files, replaced)
}
