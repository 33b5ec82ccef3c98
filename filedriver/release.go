package filedriver

import (
	"context"
	"fmt"

	"github.com/distlock/lock/driver"
)

// Release closes req.Owner's descriptor on the key's lock file, which drops the
// flock. It returns driver.ErrNotHeld if req.Owner holds no lock on req.Key, or if
// the lock file had been deleted or replaced so the lock no longer excluded
// anyone; it never touches another owner's descriptor.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	k := holdKey{req.Key, req.Owner}
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return err
	}
	h, ok := d.held.TakeLocked(k)
	if !ok {
		d.held.Unlock()
		return driver.ErrNotHeld
	}
	f := h.f
	files := h.detach()
	d.held.Unlock()
	if files == nil {
		return errSevered
	}
	same, err := samePath(f, h.path)
	h.end(files, err == nil && !same) // closing the last descriptor of an open file drops its flock
	if err == nil && !same {
		return fmt.Errorf("%w: lock file %s was deleted or replaced", driver.ErrNotHeld, h.path)
	}
	return nil
}
