package redlockdriver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/distlock/lock/driver"
)

var _ driver.SetAcquirer = (*Driver)(nil)

// TryAcquireSet implements driver.SetAcquirer for exclusive locks: one round
// sends each server one call of set.lua for the whole set, which takes every
// lock there or none (a key held, or waited for by a writer, refuses it).
// The set is granted when a majority of the servers took every lock within
// the validity of the shortest TTL, as TryAcquire grants one; otherwise what
// any server took is given back, and the error is TryAcquire's
// (driver.ErrLocked when the keys are held). Shared requests are
// driver.ErrUnsupported: package lock takes them one at a time.
func (d *Driver) TryAcquireSet(ctx context.Context, reqs []*request) ([]driver.Grant, error) {
	if err := driver.CheckSet("redlockdriver", reqs); err != nil {
		return nil, err
	}
	if err := d.begin(ctx); err != nil {
		return nil, err
	}
	defer d.calls.Done()
	start := time.Now()
	since := "0 " + strconv.FormatInt(start.UnixMicro(), 10) + " "
	shortest := reqs[0]
	keys := make([]string, 0, 3*len(reqs))
	args := make([]any, 0, 4*len(reqs))
	for _, req := range reqs {
		switch {
		case req.Shared:
			return nil, fmt.Errorf("%w: redlockdriver: a set of shared locks is taken one lock at a time", driver.ErrUnsupported)
		case req.TTL < shortest.TTL:
			shortest = req
		}
		k := d.keys(req.Key)
		keys = append(keys, k.Lock, k.Writers, k.Grant)
		args = append(args, req.Owner, millis(req.TTL), since+req.Label, millis(recordTTL(req.TTL)))
	}
	v := d.poll(ctx, opAcquireSet, keys, args, shortest, start)
	o := d.roundOutcome(v, shortest)
	if o != won {
		if v.yes > 0 || v.answered < len(d.servers) {
			d.releaseAll(reqs) // a server may have taken the set, late or in a lost round
		}
		return nil, d.failed(v, o)
	}
	grants := make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		d.record(req, v)
		grants[i] = driver.Grant{Start: v.start}
	}
	return grants, nil
}
