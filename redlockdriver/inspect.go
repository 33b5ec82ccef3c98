package redlockdriver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
	"github.com/distlock/lock/internal/redislayout"
)

// operatorWait is how long Inspect, List, ForceRelease and Relabel wait for
// the servers' answers when the per-server timeout is shorter: they spend no
// lock's validity, and on a loaded machine answers can take longer than the
// per-server timeout (see releaseWait).
const operatorWait = releaseWait

// A ForceRelease tombstone lives kit.TombstoneLife of what was left of the
// evicted lock's TTL: force.lua adds three times that to kit.TombstoneMin, so
// that the evicted holder's refreshes, due every third of its TTL and retried
// until its validity deadline, find it.

// ask runs one script on every server at once and gathers the answers until
// every server answered, done (if not nil) says the outcome is decided, the
// operator wait passed or ctx ended. A server that did not answer has
// errTimeout.
func (d *Driver) ask(ctx context.Context, o op, keys []string, args []any, done func([]reply) bool) []reply {
	dl := time.Now().Add(max(d.timeout, operatorWait))
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	out := make([]reply, len(d.servers))
	for i := range out {
		out[i] = reply{server: i, err: errTimeout}
	}
	r := d.send(o, dl, 1, func(int) ([]string, []any) { return keys, args })
	for done == nil || !done(out) {
		rep, ok := r.nextUntil(ctx.Done())
		if !ok {
			break
		}
		out[rep.server] = rep
	}
	r.stop()
	return out
}

// answered counts the replies without an error, and returns the servers'
// errors by position (nil where a server answered).
func answered(replies []reply) (int, []error) {
	n := 0
	errs := make([]error, len(replies))
	for i, rep := range replies {
		if errs[i] = rep.err; rep.err == nil {
			n++
		}
	}
	return n, errs
}

// A view is what the servers that answered an Inspect say of one owner.
type view struct {
	owner   string
	shared  bool
	servers int         // where it holds the lock
	ends    []time.Time // by those servers, when it ends there (zero: never)
	sinces  []int64     // the records' since (µs, the holder's clock)
	labels  []string    // the records' labels
}

var _ driver.Inspector = (*Driver)(nil)

// Inspect implements driver.Inspector. It runs inspect.lua on every server at
// once and reports a holder only where a majority of the servers hold its
// owner (see Inspection in the package documentation): Expires is when fewer
// than a majority would still hold it unless refreshed, less the drift
// allowance; Since and the label are the majority's records'. There is no
// token (no fencing) and Waiters is -1: the servers record waiting drivers,
// not requests.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := d.begin(ctx); err != nil {
		return driver.Info{}, err
	}
	defer d.calls.Done()
	k := d.keys(key)
	start := time.Now()
	replies := d.ask(ctx, opInspect, []string{k.Lock, k.Holders, k.Grant, k.Labels}, nil, nil)
	if err := ctx.Err(); err != nil {
		return driver.Info{}, err
	}
	views := map[string]*view{}
	var order []string
	wrong := 0
	see := func(owner string, shared bool, ms int64, rec string) {
		v := views[owner]
		if v == nil {
			v = &view{owner: owner, shared: shared}
			views[owner] = v
			order = append(order, owner)
		}
		v.servers++
		end := time.Time{}
		if ms >= 0 {
			// From before the request went out: the server read the TTL
			// later, so the lock lasts at least this long there.
			end = start.Add(time.Duration(ms) * time.Millisecond)
		}
		v.ends = append(v.ends, end)
		if _, us, label, ok := redislayout.ParseRecord(rec); ok && us > 0 {
			v.sinces = append(v.sinces, us)
			v.labels = append(v.labels, label)
		}
	}
	for i, rep := range replies {
		if rep.err != nil {
			continue
		}
		vals, _ := rep.val.([]any)
		status := int64(-99)
		if len(vals) > 0 {
			status, _ = vals[0].(int64)
		}
		switch {
		case status == 0:
		case status == -1:
			wrong++ // not a lock: no holder here
		case status == 1 && len(vals) == 4:
			owner, _ := vals[1].(string)
			pttl, _ := vals[2].(int64)
			rec, _ := vals[3].(string)
			see(owner, false, pttl, rec)
		case status == 2 && len(vals)%3 == 1:
			for j := 1; j < len(vals); j += 3 {
				owner, _ := vals[j].(string)
				left, _ := vals[j+1].(int64)
				rec, _ := vals[j+2].(string)
				see(owner, true, max(left, 0), rec)
			}
		default:
			replies[i].err = fmt.Errorf("inspect script answered %v", rep.val)
		}
	}
	n, errs := answered(replies)
	if n < d.quorum {
		return driver.Info{}, d.quorumError(errs, n)
	}
	if wrong >= d.quorum {
		return driver.Info{}, ErrWrongType
	}
	in := driver.Info{Waiters: -1}
	for _, owner := range order {
		v := views[owner]
		if v.servers < d.quorum {
			continue // a minority's view: see Inspection in the package doc
		}
		in.Holders = append(in.Holders, v.holder(d.quorum, start))
	}
	slices.SortStableFunc(in.Holders, func(a, b driver.Holder) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Owner, b.Owner))
	})
	return in, nil
}

// holder is the Holder a majority of the servers agree on.
func (v *view) holder(quorum int, start time.Time) driver.Holder {
	h := driver.Holder{Owner: v.owner, Shared: v.shared}
	// The quorum-th latest end: from then on fewer than a majority hold it.
	ends := slices.Clone(v.ends)
	slices.SortFunc(ends, func(a, b time.Time) int {
		switch {
		case a.IsZero() && b.IsZero():
			return 0
		case a.IsZero():
			return -1
		case b.IsZero():
			return 1
		}
		return b.Compare(a)
	})
	if end := ends[quorum-1]; !end.IsZero() {
		// The servers' clocks may run fast by the drift allowance.
		h.Expires = end.Add(-driver.Drift(end.Sub(start)))
	}
	if len(v.sinces) > 0 {
		s := slices.Clone(v.sinces)
		slices.Sort(s)
		h.Since = time.UnixMicro(s[len(s)/2]) // the median: a server an earlier round of the same request reached late may keep that round's record
	}
	h.Label = mostCommon(v.labels)
	if len(v.labels) == 0 && !v.shared {
		// A lock without our record: another Redlock client's, whose value
		// is all there is to tell who holds it.
		h.Label = v.owner
	}
	return h
}

// mostCommon returns the label most servers store (a Relabel that reached
// only some of them leaves two), the first seen among equals.
func mostCommon(labels []string) string {
	best, most := "", 0
	for _, l := range labels {
		n := 0
		for _, m := range labels {
			if m == l {
				n++
			}
		}
		if n > most {
			best, most = l, n
		}
	}
	return best
}

var _ driver.Lister = (*Driver)(nil)

// List implements driver.Lister: SCAN for the lock keys under prefix (the
// only keys of the driver that end with a closing brace) and GET their
// values, on every server at once; a key is listed when a majority of the
// servers hold it with one value (one owner, or the shared marker).
func (d *Driver) List(ctx context.Context, prefix string) ([]string, error) {
	if err := d.begin(ctx); err != nil {
		return nil, err
	}
	defer d.calls.Done()
	pattern := redislayout.ScanPattern(d.prefix, prefix)
	values := make([]map[string]string, len(d.servers)) // by server: lock key -> value
	errs := make([]error, len(d.servers))
	var wg sync.WaitGroup
	for i, s := range d.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			values[i], errs[i] = d.scan(ctx, s.client, pattern)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	if n < d.quorum {
		return nil, d.quorumError(errs, n)
	}
	votes := map[[2]string]int{} // {lock key, value} -> servers
	var out []string
	for _, vs := range values {
		for name, v := range vs {
			votes[[2]string{name, v}]++
			if votes[[2]string{name, v}] != d.quorum {
				continue
			}
			if user, ok := redislayout.UserKey(d.prefix, name, prefix); ok {
				out = append(out, user)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// scan returns the lock keys matching pattern on one server, with their
// values, on every primary of a Cluster.
func (d *Driver) scan(ctx context.Context, c redis.UniversalClient, pattern string) (map[string]string, error) {
	var mu sync.Mutex
	out := map[string]string{}
	one := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			page, cancel := context.WithTimeout(ctx, max(d.timeout, operatorWait))
			names, next, err := c.ScanType(page, cursor, pattern, 1000, "string").Result()
			if err == nil && len(names) > 0 {
				var vals []*redis.StringCmd
				pipe := c.Pipeline()
				for _, name := range names {
					vals = append(vals, pipe.Get(page, name))
				}
				_, err = pipe.Exec(page)
				if err == redis.Nil {
					err = nil // a key that expired since the SCAN
				}
				mu.Lock()
				for i, name := range names {
					if v, verr := vals[i].Result(); verr == nil {
						out[name] = v
					}
				}
				mu.Unlock()
			}
			cancel()
			if err != nil {
				return timeoutErr(err)
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return out, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	}
	return out, one(ctx, c)
}

var _ driver.Evictor = (*Driver)(nil)

// ForceRelease implements driver.Evictor: force.lua on every server at once
// deletes the lock and its holders' records whoever holds them, leaves a
// tombstone for each evicted owner (so that its Refresh reports
// driver.ErrForceReleased) and tells the waiting drivers as a release does.
// It returns how many owners it evicted on the servers that answered (a
// minority's leftover included: it too would weigh on the next majority),
// driver.ErrNotHeld when none, and an error matching ErrNoQuorum when fewer
// than a majority answered (the key may then be freed on some only). Locks
// of this Driver that it evicted are reported lost at once.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.begin(ctx); err != nil {
		return 0, err
	}
	defer d.calls.Done()
	k := d.keys(key)
	replies := d.ask(ctx, opForce, []string{k.Lock, k.Waiters, k.Holders, k.Grant, k.Labels, k.Forced},
		[]any{millis(kit.TombstoneMin)}, nil)
	evicted := map[string]bool{}
	wrong := 0
	for i, rep := range replies {
		if rep.err != nil {
			continue
		}
		vals, _ := rep.val.([]any)
		status := int64(-99)
		if len(vals) > 0 {
			status, _ = vals[0].(int64)
		}
		switch status {
		case 0:
		case 1:
			for _, o := range vals[1:] {
				if s, ok := o.(string); ok {
					evicted[s] = true
				}
			}
		case -1:
			wrong++
		case -3:
			replies[i].err = fmt.Errorf("the lock's forced key holds data of another type")
		default:
			replies[i].err = fmt.Errorf("force script answered %v", rep.val)
		}
	}
	d.evicted(key, evicted)
	n, errs := answered(replies)
	switch {
	case n < d.quorum:
		if err := ctx.Err(); err != nil {
			return len(evicted), err
		}
		return len(evicted), d.quorumError(errs, n)
	case len(evicted) == 0 && wrong >= d.quorum:
		return 0, ErrWrongType
	case len(evicted) == 0:
		return 0, driver.ErrNotHeld
	}
	return len(evicted), nil
}

// evicted reports this Driver's own locks on key whose owners ForceRelease
// evicted as lost, at once (those of other drivers learn it at their next
// refresh, from the tombstones).
func (d *Driver) evicted(key string, owners map[string]bool) {
	var lost []*request
	d.held.Lock()
	d.held.EachLocked(func(req *request, _ heldLock) {
		if req.Key == key && owners[req.Owner] {
			lost = append(lost, req)
			d.held.TakeLocked(req)
			delete(d.undecided, req)
		}
	})
	d.held.Unlock()
	for _, req := range lost {
		if req.Lost != nil {
			req.Lost.Lost(fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrForceReleased))
		}
		// The servers that did not answer may still hold it: give it back
		// there, as a lock found lost is.
		d.releaseEverywhere(releaseRound{k: d.keys(req.Key), req: req, notify: true, ended: true})
	}
}

var _ driver.Labeler = (*Driver)(nil)

// Relabel implements driver.Labeler: relabel.lua on every server at once
// replaces the label in req.Owner's record where it holds the lock. It
// succeeds when a majority did, returns driver.ErrNotHeld when too many
// servers no longer hold the owner for a majority to, and an error matching
// ErrNoQuorum otherwise (the label may then be new on some servers only;
// Inspect reports the one most of the majority store).
func (d *Driver) Relabel(ctx context.Context, req *request, label string) error {
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.calls.Done()
	k := d.keys(req.Key)
	count := func(replies []reply) (yes, no int) {
		for _, rep := range replies {
			if rep.err == nil {
				if n, _ := rep.val.(int64); n == 1 {
					yes++
				} else {
					no++
				}
			}
		}
		return yes, no
	}
	decided := func(replies []reply) bool {
		yes, no := count(replies)
		return yes >= d.quorum || no > len(d.servers)-d.quorum
	}
	replies := d.ask(ctx, opRelabel, []string{k.Lock, k.Grant, k.Holders, k.Labels}, []any{req.Owner, label, millis(recordKeep(req.TTL))}, decided)
	yes, no := count(replies)
	switch {
	case yes >= d.quorum:
		return nil
	case no > len(d.servers)-d.quorum:
		return driver.ErrNotHeld
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n, errs := answered(replies)
	if n >= d.quorum {
		// Answered, but split between held and not: the outcome is unknown.
		return fmt.Errorf("%w: %w: relabelled on %d, not held on %d of %d servers", driver.ErrUnavailable, ErrNoQuorum, yes, no, len(d.servers))
	}
	return d.quorumError(errs, n)
}
