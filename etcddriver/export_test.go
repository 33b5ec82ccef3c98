package etcddriver

import (
	"context"
	"errors"

	"github.com/distlock/lock/fence"
)

// MaxLeaseTTL is the longest lease the driver asks etcd for, etcd's own
// maximum; package lock accepts less (Capabilities.MaxTTL).
const MaxLeaseTTL = maxLeaseTTL

// SetWatchThreshold makes Drivers holding n or more locks confirm refreshes
// through the prefix watch (refreshwatch.go), until the returned func
// restores the default.
func SetWatchThreshold(n int64) (restore func()) {
	old := watchThreshold.Swap(n)
	return func() { watchThreshold.Store(old) }
}

// EndRefreshWatch ends the Driver's refresh watch, as a compaction or a
// member that lost its leader would, and returns once it delivers no more
// events; the Driver starts a new one.
func (d *Driver) EndRefreshWatch() {
	d.held.Lock()
	defer d.held.Unlock()
	if d.rw == nil || d.rw.cancel == nil {
		return
	}
	d.rw.cancel()
	for d.rw.live {
		moved := d.rw.moved
		d.held.Unlock()
		<-moved
		d.held.Lock()
	}
}

// AwaitRefreshWatch returns once the Driver's refresh watch delivers events,
// or ctx ends.
func (d *Driver) AwaitRefreshWatch(ctx context.Context) error {
	d.held.Lock()
	defer d.held.Unlock()
	for d.rw == nil || !d.rw.live {
		if d.rw == nil {
			return errors.New("no refresh watch")
		}
		moved := d.rw.moved
		d.held.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			d.held.Lock()
			return ctx.Err()
		}
		d.held.Lock()
	}
	return nil
}

// RefusedBy returns the stored token that refused a fenced write, from its
// error.
func RefusedBy(err error) (uint64, bool) {
	var se *fence.StaleError
	if errors.As(err, &se) {
		return se.Highest, true
	}
	return 0, false
}
