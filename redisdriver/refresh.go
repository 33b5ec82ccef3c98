package redisdriver

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
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
	ctx, done := d.attempt(ctx)
	return done(classify(d.refresh(ctx, []*driver.Request{req}, true)[0]))
}

// RefreshBatch refreshes every request in one pipeline (one round trip per
// Cluster node) and returns one error per request, as Refresh would. The
// exclusive locks of one slot (all of them, on a single server) are
// refreshed by one script call per 256 locks: one command per lock on the
// server (GETEX), plus rarely one that extends the fence record.
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

// refreshBatchSize is the most locks one call of refresh.lua extends: see
// redisproto.RefreshBatch, which redlockdriver shares.
const refreshBatchSize = redisproto.RefreshBatch

// fenceDue reports whether a refresh sent at now that extends a lock to
// expire at until must extend the lock's fence record too (which holds the
// holder's record): when the record's expiry is unknown (the lock's first
// refresh: a grant keeps the expiry of a record it finds), or the lock would
// come within half of fenceKeep of it. So the record outlives the lock
// without a command per refresh: once a lock is held, its record is extended
// once every twelve hours or so.
func fenceDue(h heldLock, until time.Duration) bool {
	if h.fenceUntil == noRecord {
		return false
	}
	return h.fenceUntil == 0 || until > h.fenceExpiry()-fenceKeep/2
}

// A refreshCall is one script call of a refresh: refresh.lua for a batch of
// exclusive locks of one slot, or shapedrefresh.lua for one shaped hold.
type refreshCall struct {
	scriptCall
	reqs []int // the indices of the requests it covers
}

// refresh extends every request's lock (or only checks it when extend is
// false): the exclusive locks in batches of one refresh.lua call per slot
// (one per refreshBatchSize locks), the shaped holds one shapedrefresh.lua
// each, all in one pipeline (one round trip per Cluster node). Then it
// compares the run_id of each lock's server with the one it was granted on.
// Outside a cluster the INFO that reads it rides in the same pipeline, after
// the scripts, so a restart before any script ran is seen; in a cluster each
// node involved is asked once.
func (d *Driver) refresh(ctx context.Context, reqs []*driver.Request, extend bool) []error {
	errs := make([]error, len(reqs))
	lockKeys := make([]string, len(reqs))
	fenced := make([]bool, len(reqs)) // the call extends the fence record
	now := d.since()                  // before sending: the record's expiry is later
	d.held.Lock()
	held := make([]heldLock, len(reqs))
	for i, r := range reqs {
		held[i] = d.held.GetLocked(r)
	}
	d.held.Unlock()

	var calls []*refreshCall
	batches := map[int]*refreshCall{} // the open batch of each slot
	for i, r := range reqs {
		k := d.keys(r.Key)
		lockKeys[i] = k.Lock
		ttl := "0"
		if extend {
			ttl = strconv.FormatInt(millis(r.TTL), 10)
		}
		if n := shape(r); n >= 0 {
			calls = append(calls, &refreshCall{
				scriptCall: scriptCall{
					script: shapedRefreshScript,
					keys:   []string{k.Lock, k.Holders, k.Labels, k.Forced},
					args:   []any{r.Owner, ttl, n},
				},
				reqs: []int{i},
			})
			continue
		}
		slot := 0
		if d.cluster != nil {
			slot = redisproto.Slot(k.Lock)
		}
		b := batches[slot]
		if b == nil || len(b.reqs) == refreshBatchSize {
			b = &refreshCall{scriptCall: scriptCall{script: refreshScript}}
			batches[slot] = b
			calls = append(calls, b)
		}
		keep := "0"
		if extend && fenceDue(held[i], now+r.TTL) {
			keep = strconv.FormatInt(millis(r.TTL+fenceKeep), 10)
			fenced[i] = true
		}
		b.keys = append(b.keys, k.Lock, k.Fence, k.Forced)
		b.args = append(b.args, r.Owner, ttl, keep)
		b.reqs = append(b.reqs, i)
	}
	sent := make([]scriptCall, len(calls))
	for j, c := range calls {
		sent[j] = c.scriptCall
	}
	var info *redis.StringCmd
	var extra func(redis.Pipeliner)
	if d.cluster == nil {
		extra = func(p redis.Pipeliner) { info = p.Info(ctx, "server") }
	}
	dials := d.dialWatch.Dials() // before the INFO is sent: see grantedBy
	cmds := evalPipelined(ctx, d.client, sent, extra)

	// Each request's answer: refresh.lua's codes (shapedrefresh.lua's are
	// the same, without 3).
	codes := make([]int64, len(reqs))
	for j, cmd := range cmds {
		var err error
		if calls[j].script == refreshScript {
			var vs []int64
			if err = cmd.Err(); err == nil {
				if vs, err = redisproto.Codes(cmd.Val(), len(calls[j].reqs)); err != nil {
					err = fmt.Errorf("redisdriver: %w", err)
				}
			}
			for n, i := range calls[j].reqs {
				if err == nil {
					codes[i] = vs[n]
				}
			}
		} else {
			codes[calls[j].reqs[0]], err = cmd.Int64()
		}
		if err != nil {
			for _, i := range calls[j].reqs {
				errs[i] = err
			}
		}
	}

	seen := map[string]seenID{} // run_id by node address, read in this call
	if info != nil && info.Err() == nil {
		if id, ok := redislayout.ParseRunID(info.Val()); ok {
			seen[""] = seenID{id: id, dials: dials}
		}
	}
	var changed []*driver.Request
	for i, n := range codes {
		switch {
		case errs[i] != nil:
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
			if granted, ok := d.heldNode(reqs[i]); ok {
				if now, err := d.currentNode(ctx, lockKeys[i], seen); err == nil && now != granted {
					errs[i] = errServerChanged
				}
			}
			d.forget(reqs[i])
		default:
			granted, ok := d.heldNode(reqs[i])
			if !ok {
				continue
			}
			current, err := d.currentNode(ctx, lockKeys[i], seen)
			if err != nil {
				errs[i] = err
				continue
			}
			if current != granted {
				errs[i] = errServerChanged
				changed = append(changed, reqs[i])
				continue
			}
			if fenced[i] {
				d.fenceExtended(reqs[i], now+reqs[i].TTL+fenceKeep)
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

// fenceExtended notes that req's fence record lives until at least until
// (by since), if req is still held. Whole seconds, rounded down, keep the
// note small and never later than the record's expiry; 68 years of a
// driver's life fit.
func (d *Driver) fenceExtended(req *driver.Request, until time.Duration) {
	secs := int32(min(until/time.Second, math.MaxInt32))
	d.held.Lock()
	if h, ok := d.held.LookupLocked(req); ok {
		h.fenceUntil = secs
		_ = d.held.PutLocked(req, h) // refused only after Close, when nothing is kept
	}
	d.held.Unlock()
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
	calls := make([]scriptCall, len(reqs))
	for i, r := range reqs {
		calls[i] = scriptCall{script: releaseScript, keys: scriptKeys(d.keys(r.Key)), args: []any{r.Owner}}
		if n := shape(r); n >= 0 {
			calls[i].script, calls[i].args = shapedReleaseScript, []any{r.Owner, n}
		}
	}
	_ = evalPipelined(ctx, d.client, calls, nil)
	for _, r := range reqs {
		d.forget(r)
	}
}

// checkHeld confirms every held lock with the server (without extending it) and
// reports the lost ones through Request.Lost. It runs when the pub/sub
// connection comes back, the sign that the server may have restarted.
func (d *Driver) checkHeld() {
	d.held.Lock()
	reqs := make([]*driver.Request, 0, d.held.LenLocked())
	d.held.EachLocked(func(r *driver.Request, _ heldLock) { reqs = append(reqs, r) })
	d.held.Unlock()
	if len(reqs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, checkTimeout)
	defer cancel()
	for i, err := range d.refresh(ctx, reqs, false) {
		if isNotHeld(err) && reqs[i].Lost != nil {
			reqs[i].Lost.Lost(err)
		}
	}
}

// checkTimeout bounds checkHeld; a lock it cannot confirm is left to its
// refresh. It also bounds how long Close waits for a check under way on a
// server that stopped answering, when the driver does not own its client.
const checkTimeout = time.Second
