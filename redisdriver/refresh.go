package redisdriver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
)

// errServerChanged is what a lock on a restarted or replaced server reports.
var errServerChanged = fmt.Errorf("%w: %w (%w)", driver.ErrNotHeld, ErrServerChanged, driver.ErrServerChanged)

// errGone and errTakenOver are what a refresh that finds the key gone, or
// holding another owner, reports.
var (
	errGone      = fmt.Errorf("%w: %w: the lock's key is gone", driver.ErrNotHeld, driver.ErrExpired)
	errTakenOver = fmt.Errorf("%w: %w: the lock's key holds another owner", driver.ErrNotHeld, driver.ErrTakenOver)
)

// errForced is what a lock evicted by ForceRelease reports.
var errForced = fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrForceReleased)

// Refresh extends the lock to req.TTL from now if req.Owner holds it. It returns
// driver.ErrNotHeld when the key is gone or holds another owner, an error
// matching both driver.ErrNotHeld and driver.ErrForceReleased when
// ForceRelease evicted req.Owner (within a few TTLs of the eviction), and an
// error matching both driver.ErrNotHeld and ErrServerChanged when the server
// that granted the lock was restarted or replaced since.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	if err := d.usable(ctx); err != nil {
		return err
	}
	return classify(d.refresh(ctx, []*driver.Request{req}, true)[0])
}

// RefreshBatch refreshes every request in one pipeline (one round trip per
// Cluster node) and returns one error per request, as Refresh would.
func (d *Driver) RefreshBatch(ctx context.Context, reqs []*driver.Request) []error {
	if err := d.usable(ctx); err != nil {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	errs := d.refresh(ctx, reqs, true)
	for i, err := range errs {
		errs[i] = classify(err)
	}
	return errs
}

// refresh runs refresh.lua for every request (extending each lock, or only
// checking it when extend is false), then compares the run_id of each lock's
// server with the one it was granted on. Outside a cluster the INFO that reads
// it rides in the same pipeline, after the scripts, so a restart before any
// script ran is seen; in a cluster each node involved is asked once.
func (d *Driver) refresh(ctx context.Context, reqs []*driver.Request, extend bool) []error {
	errs := make([]error, len(reqs))
	keys := make([][]string, len(reqs))
	args := make([][]any, len(reqs))
	scripts := make([]*redis.Script, len(reqs))
	for i, r := range reqs {
		k := d.keys(r.Key)
		ttl := "0"
		if extend {
			ttl = strconv.FormatInt(millis(r.TTL), 10)
		}
		if n := shape(r); n >= 0 {
			keys[i] = []string{k.lock, k.holders, k.labels, k.forced}
			args[i] = []any{r.Owner, ttl, n}
			scripts[i] = shapedRefreshScript
		} else {
			keys[i] = []string{k.lock, k.fence, k.forced}
			args[i] = []any{r.Owner, ttl}
			scripts[i] = refreshScript
		}
	}
	var info *redis.StringCmd
	var extra func(redis.Pipeliner)
	if d.cluster == nil {
		extra = func(p redis.Pipeliner) { info = p.Info(ctx, "server") }
	}
	dials := d.dialWatch.Dials() // before the INFO is sent: see grantedBy
	cmds := evalPipelined(ctx, d.client, scripts, keys, args, extra)

	seen := map[string]seenID{} // run_id by node address, read in this call
	if info != nil && info.Err() == nil {
		if id, err := parseRunID(info.Val()); err == nil {
			seen[""] = seenID{id: id, dials: dials}
		}
	}
	var changed []*driver.Request
	for i, cmd := range cmds {
		n, err := cmd.Int64()
		switch {
		case err != nil:
			errs[i] = err
		case n == 2:
			errs[i] = errForced
			d.forget(reqs[i])
		case n == 0 || n == 3:
			// A lock missing from a server that replaced ours (a failover to
			// a replica that had not received it, or a lock released by a
			// concurrent check that found the server changed) was lost to
			// the change: say so.
			errs[i] = errGone
			if n == 3 {
				errs[i] = errTakenOver
			}
			d.mu.Lock()
			granted, ok := d.held[reqs[i]]
			d.mu.Unlock()
			if ok {
				if now, err := d.currentNode(ctx, keys[i][0], seen); err == nil && now != granted {
					errs[i] = errServerChanged
				}
			}
			d.forget(reqs[i])
		default:
			d.mu.Lock()
			granted, ok := d.held[reqs[i]]
			d.mu.Unlock()
			if !ok {
				continue
			}
			now, err := d.currentNode(ctx, keys[i][0], seen)
			if err != nil {
				errs[i] = err
				continue
			}
			if now != granted {
				errs[i] = errServerChanged
				changed = append(changed, reqs[i])
			}
		}
	}
	for addr, id := range seen {
		d.sawRunID(addr, id.id, id.dials)
	}
	if len(changed) > 0 {
		d.releaseLost(changed)
	}
	return errs
}

// currentNode returns the node that holds lockKey now, asking each node for its
// run_id at most once per refresh (seen).
func (d *Driver) currentNode(ctx context.Context, lockKey string, seen map[string]seenID) (node, error) {
	addr, c, _, err := d.nodeClient(ctx, lockKey)
	if err != nil {
		return node{}, err
	}
	id, ok := seen[addr]
	if !ok {
		id.dials = d.dialWatch.Dials()
		if id.id, err = runID(ctx, c); err != nil {
			return node{}, err
		}
		seen[addr] = id
	}
	return node{addr: addr, runID: id.id}, nil
}

// releaseLost deletes locks that were declared lost because their server
// changed, but whose keys survived (a restart with persistence, a failover to
// an up-to-date replica), so that nobody waits for them; the queue moves on.
func (d *Driver) releaseLost(reqs []*driver.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	keys := make([][]string, len(reqs))
	args := make([][]any, len(reqs))
	scripts := make([]*redis.Script, len(reqs))
	for i, r := range reqs {
		keys[i] = d.keys(r.Key).all()
		if n := shape(r); n >= 0 {
			args[i] = []any{r.Owner, n}
			scripts[i] = shapedReleaseScript
		} else {
			args[i] = []any{r.Owner}
			scripts[i] = releaseScript
		}
	}
	_ = evalPipelined(ctx, d.client, scripts, keys, args, nil)
	for _, r := range reqs {
		d.forget(r)
	}
}

// checkHeld confirms every held lock with the server (without extending it) and
// reports the lost ones through Request.Lost. It runs when the pub/sub
// connection comes back, the sign that the server may have restarted.
func (d *Driver) checkHeld() {
	d.mu.Lock()
	reqs := make([]*driver.Request, 0, len(d.held))
	for r := range d.held {
		reqs = append(reqs, r)
	}
	d.mu.Unlock()
	if len(reqs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, checkTimeout)
	defer cancel()
	for i, err := range d.refresh(ctx, reqs, false) {
		if isNotHeld(err) && reqs[i].Lost != nil {
			reqs[i].Lost(err)
		}
	}
}

// checkTimeout bounds checkHeld; a lock it cannot confirm is left to its
// refresh. It also bounds how long Close waits for a check under way on a
// server that stopped answering, when the driver does not own its client.
const checkTimeout = time.Second
