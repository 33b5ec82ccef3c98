package redlockdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
)

// errGone is what a refresh that finds the lock gone from too many servers
// reports: to the driver a deleted key looks like an expired one.
var errGone = fmt.Errorf("%w: %w: the lock is gone from too many servers for a majority", driver.ErrNotHeld, driver.ErrExpired)

// Refresh extends the lock to req.TTL on every server where req.Owner holds it.
// It succeeds when a majority did; it returns driver.ErrNotHeld when so many
// servers no longer hold the owner that no majority can (the lock is lost, and
// what is left of it is given back), and otherwise an error matching
// ErrNoQuorum (and driver.ErrUnavailable unless a server refused for good):
// the outcome is unknown, and package lock tries again until the lock's
// validity deadline. A lock lost because an operator evicted it
// (ForceRelease, whose tombstone a server reports) is driver.ErrNotHeld
// wrapping driver.ErrForceReleased.
func (d *Driver) Refresh(ctx context.Context, req *request) error {
	return d.RefreshBatch(ctx, []*request{req})[0]
}

// RefreshBatch refreshes every request in one fan-out (each server's worker
// pipelines the batch: one round trip per server) and returns one error per
// request, as Refresh would.
func (d *Driver) RefreshBatch(ctx context.Context, reqs []*request) []error {
	errs := make([]error, len(reqs))
	if err := d.begin(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer d.calls.Done()
	type tally struct {
		ok, not   int
		forced    int    // of not: servers where an operator evicted the owner
		okBy      []bool // by server, whether it extended the lock
		firstErr  error
		permanent bool // a server refused for a reason that will not pass
	}
	t := make([]tally, len(reqs))
	okBy := make([][]bool, len(reqs))
	for i := range t {
		okBy[i] = make([]bool, len(d.servers))
		t[i].okBy = okBy[i]
	}
	keys := make([][]string, len(reqs))
	timeout := time.Duration(0)
	for i, r := range reqs {
		k := d.keys(r.Key)
		keys[i] = []string{k.lock, k.grant, k.forced}
		if r.Shared {
			keys[i] = append(keys[i], k.holders, k.labels)
		}
		timeout = max(timeout, d.timeoutFor(r.TTL))
	}
	start := time.Now()
	dl := start.Add(timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	wait := d.readmitting(reqs)
	waiting := 0 // answers still wanted from those servers
	for _, w := range wait {
		if w {
			waiting += len(reqs)
		}
	}
	r := d.send(opRefresh, dl, len(reqs), func(c int) ([]string, []any) {
		return keys[c], []any{reqs[c].Owner, millis(reqs[c].TTL)}
	})
	decided := 0
	for decided < len(reqs) || waiting > 0 {
		rep, ok := r.next()
		if !ok {
			break
		}
		if wait[rep.server] {
			waiting--
		}
		x := &t[rep.call]
		before := x.ok >= d.quorum || x.not > len(d.servers)-d.quorum
		switch n, _ := rep.val.(int64); {
		case rep.err != nil:
			if x.firstErr == nil || (!x.permanent && !isTransient(rep.err)) {
				x.firstErr = d.serverError(rep.server, rep.err)
			}
			x.permanent = x.permanent || !isTransient(rep.err)
		case n == refHeld:
			x.ok++
			x.okBy[rep.server] = true
		case n == refForced:
			x.not++
			x.forced++
		default:
			x.not++
		}
		if !before && (x.ok >= d.quorum || x.not > len(d.servers)-d.quorum) {
			decided++
		}
	}
	r.stop()
	var lost []*request
	for i, x := range t {
		switch {
		case x.ok >= d.quorum:
		case x.not > len(d.servers)-d.quorum:
			errs[i] = errGone
			if x.forced > 0 {
				// An operator evicted it (on the others it may have
				// expired meanwhile, or the eviction did not reach them).
				errs[i] = fmt.Errorf("%w: %w (on %d of %d servers)", driver.ErrNotHeld, driver.ErrForceReleased, x.forced, len(d.servers))
			}
			lost = append(lost, reqs[i])
		default:
			if x.firstErr == nil {
				x.firstErr = errTimeout
			}
			errs[i] = fmt.Errorf("%w: refreshed on %d, not held on %d of %d servers, the others did not answer (%w)",
				ErrNoQuorum, x.ok, x.not, len(d.servers), x.firstErr)
			if !x.permanent {
				errs[i] = fmt.Errorf("%w: %w", driver.ErrUnavailable, errs[i])
			}
		}
	}
	d.extended(reqs, okBy, time.Now().Add(timeout))
	// A lost lock may still hold a minority of servers: give them back, so it
	// does not weigh on the next holder's majority.
	for _, req := range lost {
		d.forget(req)
		d.release(d.keys(req.Key), req, true, "", d.newTally(), false, true, true)
	}
	return errs
}
