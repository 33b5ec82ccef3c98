package redlockdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
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

// RefreshBatch refreshes every request in one fan-out and returns one error
// per request, as Refresh would. The exclusive locks go to each server in
// calls of up to redisproto.RefreshBatch locks each (of one slot, on a server
// that is a Cluster): plain GETEX commands, or refreshbatch.lua for locks
// whose grant record is due; a shared hold in a refresh.lua call of its own.
// Each server's worker pipelines the calls (one round trip per server). A
// lock is confirmed as Refresh confirms it: by a majority of servers, within
// the per-server timeout from the time the batch was sent.
func (d *Driver) RefreshBatch(ctx context.Context, reqs []*request) []error {
	errs := make([]error, len(reqs))
	if len(reqs) == 0 {
		return errs
	}
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
	flat := make([]bool, len(reqs)*len(d.servers)) // one allocation, not one a lock
	for i := range t {
		okBy[i] = flat[i*len(d.servers) : (i+1)*len(d.servers) : (i+1)*len(d.servers)]
		t[i].okBy = okBy[i]
	}
	now := d.since() // before sending: each record's expiry is later
	calls, due := d.refreshCalls(reqs, now)
	timeout := time.Duration(0)
	minTTL := reqs[0].TTL
	for _, r := range reqs {
		timeout = max(timeout, d.timeoutFor(r.TTL))
		minTTL = min(minTTL, r.TTL)
	}
	// Each server answers each call within the per-server timeout from
	// when its worker sends it, after the calls before it in its pipeline
	// (job.timeout); the round waits for them up to the lock's TTL from
	// start (and never past ctx, which package lock sets to the validity
	// deadline), as no later answer can confirm it. Counting the time a
	// call waits in the queue, or a whole batch's calls, against one
	// per-server timeout cut large or overlapping batches on a loaded
	// machine: they failed whole, and their locks retried together into
	// the same failure until lost.
	start := time.Now()
	dl := start.Add(minTTL)
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	wait := d.readmitting(reqs)
	waiting := 0 // answers still wanted from those servers
	for _, w := range wait {
		if w {
			waiting += len(calls)
		}
	}
	r := d.sendOps(dl, timeout, len(calls), func(c int) (op, []string, []any) {
		return calls[c].op, calls[c].keys, calls[c].args
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
		c := &calls[rep.call]
		codes := []int64{0}
		err := rep.err
		if err == nil && (c.op == opRefreshBatch || c.op == opExtend) {
			codes, err = redisproto.Codes(rep.val, len(c.reqs))
		} else if err == nil {
			codes[0], _ = rep.val.(int64)
		}
		for n, i := range c.reqs {
			x := &t[i]
			before := x.ok >= d.quorum || x.not > len(d.servers)-d.quorum
			switch {
			case err != nil:
				if x.firstErr == nil || (!x.permanent && !isTransient(err)) {
					x.firstErr = d.serverError(rep.server, err)
				}
				x.permanent = x.permanent || !isTransient(err)
			case codes[n] == refHeld:
				x.ok++
				x.okBy[rep.server] = true
			case codes[n] == refForced:
				x.not++
				x.forced++
			default:
				x.not++
			}
			if !before && (x.ok >= d.quorum || x.not > len(d.servers)-d.quorum) {
				decided++
			}
		}
	}
	r.stop()
	// The locks found gone from a majority: the driver asks about the
	// exclusive ones' tombstones (refreshbatch.lua does not read them;
	// refresh.lua, a shared hold's, did), and gives back what is left on a
	// minority of servers, except for locks whose Release is under way
	// (taken out of d.held): the refresh saw that release's deletes, and the
	// Release decides and cleans up.
	var gone, giveBack []*request
	var goneAt []int
	d.held.Lock()
	for i, x := range t {
		if x.ok < d.quorum && x.not > len(d.servers)-d.quorum {
			if !reqs[i].Shared {
				gone, goneAt = append(gone, reqs[i]), append(goneAt, i)
			}
			if _, held := d.held.LookupLocked(reqs[i]); held {
				giveBack = append(giveBack, reqs[i])
			}
		}
	}
	d.held.Unlock()
	for n, f := range d.tombstones(ctx, gone, timeout) {
		t[goneAt[n]].forced += f
	}
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
	// A record extended with its lock by a majority now lives recordTTL
	// from the sending there. A server that did not answer extended both or
	// neither (one script), so there the lock still ends before the record,
	// unless it missed this refresh and takes later ones that are not due:
	// then its record may end before its lock until the next due refresh
	// (at most half of recordKeep), and Inspect reads the majority's.
	// Waiting for every server instead would keep the round open for the
	// slowest and, when one is down, make every refresh due.
	var renewed []*request
	for i, x := range t {
		if due[i] && x.ok >= d.quorum && !reqs[i].Shared {
			renewed = append(renewed, reqs[i])
		}
	}
	d.recordExtended(renewed, now)
	d.extended(reqs, okBy, time.Now().Add(timeout))
	// A lost lock may still hold a minority of servers: give them back, so it
	// does not weigh on the next holder's majority.
	for _, req := range giveBack {
		d.forget(req)
	}
	d.releaseAll(giveBack)
	return errs
}

// tombstones returns, for each of reqs (exclusive locks a refresh found
// lost), on how many servers an operator's ForceRelease left a tombstone for
// its owner (check.lua, one round for all, see pipelined, within ctx). A server
// that does not answer counts as none: the lock is lost either way, and only
// its cause (ErrForceReleased or ErrExpired) depends on the answer.
func (d *Driver) tombstones(ctx context.Context, reqs []*request, timeout time.Duration) []int {
	if len(reqs) == 0 {
		return nil
	}
	forced := make([]int, len(reqs))
	dl := pipelined(len(reqs), len(checkKeys(d.keys(reqs[0].Key), reqs[0])), timeout) // exclusive locks: as many keys each
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	r := d.sendOps(dl, timeout, len(reqs), func(c int) (op, []string, []any) {
		return opCheck, checkKeys(d.keys(reqs[c].Key), reqs[c]), []any{reqs[c].Owner}
	})
	defer r.stop()
	for {
		rep, ok := r.nextUntil(ctx.Done())
		if !ok {
			return forced
		}
		if code, _ := rep.val.(int64); rep.err == nil && code == refForced {
			forced[rep.call]++
		}
	}
}

// recordKeep is how much longer than its lock a holder's grant record is
// made to live, when the acquire writes it and when a refresh extends it:
// ten TTLs, at least a minute and at most a day. So most refreshes leave the
// record alone (one command a lock on each server, not two: see
// recordDue), and the record of a holder that died without releasing stays
// at most that long after its lock.
func recordKeep(ttl time.Duration) time.Duration {
	if ttl > 24*time.Hour/10 {
		return 24 * time.Hour
	}
	return max(10*ttl, time.Minute)
}

// recordTTL is the TTL a grant record is given: the lock's plus recordKeep
// (the lock's alone where the sum would overflow).
func recordTTL(ttl time.Duration) time.Duration {
	if t := ttl + recordKeep(ttl); t > ttl {
		return t
	}
	return ttl
}

// recordDue reports whether a refresh sent at now (by since) of a lock with
// h must extend the lock's grant record too: when the record's expiry is
// unknown, or the lock, extended to now+ttl, would come within the lock's
// due margin of it (recordMargin). The record's expiry is a lower bound, from
// the start of the round that wrote it (a server runs the script after).
func recordDue(h heldLock, now, ttl time.Duration) bool {
	return h.recordUntil == 0 || now+ttl > time.Duration(h.recordUntil)*time.Second-recordMargin(ttl, h.phase)
}

// recordMargin is how long before its grant record's end a lock extended to
// the TTL makes the record due, for a lock of the given phase: from half of
// recordKeep down by up to a quarter of it, in 256 steps, and never under a
// TTL (where half of recordKeep is, for TTLs over 12 hours, it stays that
// half, as before phases). A TTL of margin leaves room for a refresh answered
// late: its round ends within a TTL of its start, so the lock on a server it
// extended still ends before the record there.
//
// The phases spread the records' extensions: with one margin, the records of
// locks granted in a burst (100,000 in 15 s, say) all came due together, a
// tenth more work for the servers for as long as the burst had lasted, every
// half recordKeep; where the servers were already near their limit, that
// wave pushed refreshes past their locks' deadlines (docs/backends/redlock.md,
// "Record extensions spread"). Each phase's margin gives its locks a period of its own, so the waves
// flatten out, and no extension comes sooner than before half of recordKeep.
func recordMargin(ttl time.Duration, phase uint8) time.Duration {
	half := recordKeep(ttl) / 2
	spread := max(min(half/2, half-ttl), 0)
	return half - spread/256*time.Duration(phase)
}

// A refreshCall is one call of a refresh, sent to every server: GETEX
// commands (opExtend) or a call of refreshbatch.lua (the locks whose grant
// record is due) for up to redisproto.RefreshBatch exclusive locks, or
// refresh.lua for one shared hold.
type refreshCall struct {
	op   op
	keys []string
	args []any
	reqs []int // the indices of the requests it covers
	// A batch's grant records due (keys after the locks') and its byte a
	// lock saying which locks they are.
	grants []string
	due    []byte
}

// refreshCalls groups reqs into script calls: the exclusive locks in batches
// of one TTL (and one slot when a server is a Cluster, whose script calls
// must not cross slots), each shared hold alone. due[i] says whether the call extends
// reqs[i]'s grant record (see recordDue), at now by since.
func (d *Driver) refreshCalls(reqs []*request, now time.Duration) (calls []refreshCall, due []bool) {
	due = make([]bool, len(reqs))
	d.held.Lock()
	for i, r := range reqs {
		if !r.Shared {
			h, held := d.held.LookupLocked(r)
			due[i] = !held || recordDue(h, now, r.TTL)
		}
	}
	d.held.Unlock()
	clustered := false
	for _, s := range d.servers {
		if _, ok := s.client.(*redis.ClusterClient); ok {
			clustered = true
		}
	}
	// The open batch of each slot and TTL, of locks whose grant record is
	// due (a call of refreshbatch.lua) or not (GETEX commands, opExtend):
	// its index in calls. A batch's locks share a TTL, sent once.
	type batchOf struct {
		slot int
		ttl  time.Duration
		due  bool
	}
	open := map[batchOf]int{}
	for i, r := range reqs {
		ttl := millis(r.TTL)
		if r.Shared {
			k := d.keys(r.Key)
			calls = append(calls, refreshCall{
				op:   opRefresh,
				keys: []string{k.Lock, k.Grant, k.Forced, k.Holders, k.Labels},
				args: []any{r.Owner, ttl},
				reqs: []int{i},
			})
			continue
		}
		lock := redislayout.LockKey(d.prefix, r.Key)
		slot := 0
		if clustered {
			slot = redisproto.Slot(lock)
		}
		b := batchOf{slot, r.TTL, due[i]}
		j, ok := open[b]
		if !ok || len(calls[j].reqs) == redisproto.RefreshBatch {
			j = len(calls)
			open[b] = j
			c := refreshCall{op: opExtend, args: []any{r.TTL}}
			if due[i] {
				c = refreshCall{op: opRefreshBatch, args: []any{ttl, millis(recordTTL(r.TTL)), ""}}
			}
			calls = append(calls, c)
		}
		c := &calls[j]
		if due[i] {
			c.grants = append(c.grants, lock+redislayout.Grant)
			c.due = append(c.due, '1')
		}
		c.keys = append(c.keys, lock)
		c.args = append(c.args, r.Owner)
		c.reqs = append(c.reqs, i)
	}
	for j := range calls {
		if c := &calls[j]; len(c.grants) > 0 {
			c.keys = append(c.keys, c.grants...)
			c.args[2] = string(c.due)
		}
	}
	return calls, due
}

// Refresh without a script: a refresh batch none of whose grant records is
// due (nearly every one: a record comes due once in half of recordKeep) is
// sent to a server as one plain GETEX per lock in the worker's pipeline, and
// the worker compares each answer with the lock's owner, where a call of
// refreshbatch.lua ran the same GETEX from Lua: a third less server CPU a
// lock, for a little more on the client (docs/backends/redlock.md, "Refresh
// without a script"). The servers are what a Driver holding many locks runs
// out of first (see Capacity there); the client has the cores.
//
// A job of opExtend has the lock keys as its keys, and as its arguments the
// TTL (a time.Duration), then the owner of each lock. Its answer is what
// refreshbatch.lua answers: per lock, refHeld where the key held the owner
// (and is now extended), refNotHeld where it held another owner, nothing, or
// a value of another type. Any other error (a server refusing GETEX, one
// loading its data) is the job's, as a script call's error is: it says
// nothing about the lock.

// queueExtend queues j's GETEX commands on pipe.
func queueExtend(ctx context.Context, pipe redis.Pipeliner, j job) []*redis.StringCmd {
	ttl := j.args[0].(time.Duration)
	cmds := make([]*redis.StringCmd, len(j.keys))
	for i, k := range j.keys {
		cmds[i] = pipe.GetEx(ctx, k, ttl)
	}
	return cmds
}

// extendAnswer reads the answers of j's GETEX commands as refreshbatch.lua's
// codes, or returns the first error that is not about a lock.
func extendAnswer(j job, cmds []*redis.StringCmd) (any, error) {
	out := make([]any, len(cmds))
	for i, c := range cmds {
		v, err := c.Result()
		switch {
		case err == nil:
			out[i] = int64(refNotHeld)
			if owner, _ := j.args[i+1].(string); v == owner {
				out[i] = int64(refHeld)
			}
		case err == redis.Nil || redis.HasErrorPrefix(err, "WRONGTYPE"):
			out[i] = int64(refNotHeld)
		default:
			return nil, err
		}
	}
	return out, nil
}
