package filedriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/distlock/lock/driver"
)

// TryAcquire makes one attempt to take the key in the shape req asks for
// (see the package documentation). It returns driver.ErrLocked if the key is
// taken, or if a shared request finds an exclusive one waiting, and the same
// grant again if req.Owner already holds it.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	if g, ok, err := d.heldBy(req); ok || err != nil {
		return g, err
	}
	switch {
	case req.Permits > 1:
		return d.tryPermit(ctx, req)
	case req.Shared:
		return d.tryShared(ctx, req)
	}
	path := d.path(req.Key)
	for i := 0; ; i++ {
		f, start, err := tryLock(path, lockEx)
		if err != nil {
			return driver.Grant{}, err
		}
		g, err := d.grantExclusive(ctx, req, f, path, start)
		if !errors.Is(err, errReplaced) || i == maxReplaced {
			return g, err
		}
	}
}

// heldBy reports the grant of req.Owner if it already holds req.Key.
func (d *Driver) heldBy(req *driver.Request) (driver.Grant, bool, error) {
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.OpenLocked(); err != nil {
		return driver.Grant{}, false, err
	}
	k := holdKey{req.Key, req.Owner}
	h := d.held.GetLocked(k)
	if h == nil {
		return driver.Grant{}, false, nil
	}
	if h.f == nil { // severed: the lock is gone, take it afresh
		d.held.TakeLocked(k)
		return driver.Grant{}, false, nil
	}
	return driver.Grant{Token: h.token, Start: h.start}, true, nil
}

// maxReplaced bounds how often one TryAcquire reopens a lock file that was
// replaced between its open and its flock.
const maxReplaced = 8

// tryLock opens and flocks path in mode without waiting, and returns the locked
// file and the time the successful flock was attempted.
func tryLock(path string, mode int) (*os.File, time.Time, error) {
	for i := 0; ; i++ {
		f, err := openLockFile(path)
		if err != nil {
			return nil, time.Time{}, err
		}
		start := time.Now()
		if err := flockNB(f, mode); err != nil {
			f.Close()
			return nil, time.Time{}, err
		}
		same, err := samePath(f, path)
		if err != nil || same {
			if err != nil {
				f.Close()
				return nil, time.Time{}, err
			}
			return f, start, nil
		}
		f.Close() // we locked a file that is no longer at path
		if i == maxReplaced {
			return nil, time.Time{}, fmt.Errorf("filedriver: lock file %s keeps being replaced", path)
		}
	}
}

// grantExclusive bumps the fencing counter of the exclusively locked file f and
// records the lock, taken by a flock attempted at start. It publishes the
// holder file, then checks again that path still names f: ForceRelease may
// have replaced the lock file since our flock, and a lock on the old file
// excludes no one, so that is errReplaced (the caller starts again) and the
// token is never handed out. A check that passes comes before the
// replacement, whose second tombstone pass then finds our holder file.
func (d *Driver) grantExclusive(ctx context.Context, req *driver.Request, f *os.File, path string, start time.Time) (driver.Grant, error) {
	if d.testHookGranting != nil {
		d.testHookGranting(req.Key)
	}
	token, err := nextToken(f)
	if err != nil {
		f.Close()
		return driver.Grant{}, err
	}
	h := &holding{f: f, path: path, token: token, start: start}
	if err := d.publishExclusive(ctx, req, h); err != nil {
		h.end(h.detach(), false)
		return driver.Grant{}, err
	}
	if err := checkSame(f, path); err != nil {
		h.end(h.detach(), false)
		return driver.Grant{}, err
	}
	return d.grant(req, h)
}

// errReplaced: the path no longer names the file a request has locked, so
// it starts again on the file now there.
var errReplaced = errors.New("lock file replaced")

// checkSame returns errReplaced unless path still names the file f has open.
func checkSame(f *os.File, path string) error {
	same, err := samePath(f, path)
	switch {
	case err != nil:
		return err
	case !same:
		return errReplaced
	}
	return nil
}

// grant records h, whose token is set, as req's lock; if the driver was closed
// meanwhile it closes h's descriptors instead.
func (d *Driver) grant(req *driver.Request, h *holding) (driver.Grant, error) {
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.PutLocked(holdKey{req.Key, req.Owner}, h); err != nil {
		h.end(h.detach(), false)
		return driver.Grant{}, err
	}
	return driver.Grant{Token: h.token, Start: h.start}, nil
}
