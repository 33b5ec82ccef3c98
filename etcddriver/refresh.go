package etcddriver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
)

// maxTxnOps is etcd's default limit on operations in one transaction
// (--max-txn-ops); getKeys reads at most this many keys per transaction.
const maxTxnOps = 128

// Refresh implements driver.Driver. It reads our key: the lock is still ours if the
// key exists with our create revision and our lease. The lease itself is kept
// alive by the session goroutine, whose own deadline ends the lock if keepalives
// stop getting through; a refresh extends the lock's TTL on this driver (see the
// expiry in session.keep). The portable layer counts the lock valid for a TTL
// from the refresh's start, but etcd expires the lease a lease TTL after its
// last renewal, which may be up to a third of it earlier: so when the session's
// deadline falls short of that validity, the refresh renews the lease first.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	e, err := d.heldEntry(req)
	if err != nil {
		return err
	}
	d.held.Lock()
	watching := d.watchingLocked()
	d.held.Unlock()
	if watching {
		return d.RefreshBatch(ctx, []*driver.Request{req})[0]
	}
	start := time.Now()
	if err := d.renewFor(ctx, e.s, req.TTL, start); err != nil {
		return err
	}
	resp, err := d.c.Get(requireLeader(ctx), e.key)
	if err != nil {
		return d.report(ctx, err)
	}
	return d.whyLost(ctx, e, d.confirm(e, resp.Kvs, start))
}

// RefreshBatch implements driver.BatchRefresher. A lock the refresh watch
// covers (refreshwatch.go: once the Driver holds defaultWatchThreshold locks)
// is confirmed by a watch round: one sentinel write shared by the refreshes
// that started before it was sent. The others are read: sorted, as key ranges
// of up to 2,048 of them (readKeys) when the batch holds most of the
// Driver's locks, else key by key in transactions (getKeys, see denseBatch),
// up to maxReadsInFlight segments at once; the read also covers them. Each
// session of the batch gets at most one lease keepalive, shared with
// concurrent refreshes (see renewFor).
//
// Why a read or a round, when concurrency.Mutex relies on the lease
// keepalive alone: a keepalive proves the lease alive, not that our key is
// still on it (ForceRelease, or an operator's delete, removes the key and
// leaves the lease). A read proves it for one key; a round proves it for
// every covered key, by the watch's delivery of every event before the
// sentinel's (never by a progress notification, which etcd may send ahead of
// the events it covers: etcd issue #15220, present in the 3.4.23 the tests
// run). Reading every key each round took etcd's whole core at 100,000 held
// locks and lost them (issue 23); a round costs one write and the prefix's
// events.
//
// Why ranges, concurrently: a batch holds every lock due at once, thousands
// when many are held, and transactions of 128 single-key reads sent one after
// another (each waiting for a keepalive first, as they did) took longer than
// the validity left to the batch on a loaded machine, so locks were lost for
// being many (issue 23).
//
// The validity rule is kept: every lock of the batch is confirmed from start,
// taken before any of the batch's requests (the keepalive, every read, the
// round's write) is sent, so no lock is counted valid for longer than from
// the send time of the requests that confirmed it; a request sent later than
// start only makes the count conservative, by at most the batch's duration.
func (d *Driver) RefreshBatch(ctx context.Context, reqs []*driver.Request) []error {
	errs := make([]error, len(reqs))
	lctx := requireLeader(ctx)
	entries := make([]*entry, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	for i, req := range reqs {
		e, err := d.heldEntry(req)
		if err != nil {
			errs[i] = err
			continue
		}
		entries = append(entries, e)
		index = append(index, i)
	}
	if len(entries) == 0 {
		return errs
	}
	entries, index, watched, watchedIndex := d.splitCovered(entries, index)
	entries, index = sortByKey(entries, index)
	read := d.getKeys
	if d.denseBatch(len(entries)) {
		read = d.readKeys
	}
	start := time.Now()

	// The keepalives of the batch's sessions (usually one), its reads and its
	// watch round run together: all are sent after start, and each lock needs
	// its session's keepalive and its read or the round.
	ttls := map[*session]time.Duration{} // the longest TTL of each session's locks
	for _, e := range entries {
		ttls[e.s] = max(ttls[e.s], e.req.TTL)
	}
	for _, e := range watched {
		ttls[e.s] = max(ttls[e.s], e.req.TTL)
	}
	renewed := make(map[*session]error, len(ttls))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards renewed while the goroutines run
		sem      = make(chan struct{}, maxReadsInFlight)
		gen      uint32
		roundErr error
	)
	for s, ttl := range ttls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := d.renewFor(ctx, s, ttl, start)
			mu.Lock()
			renewed[s] = err
			mu.Unlock()
		}()
	}
	if len(watched) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := roundContext(ctx, start)
			defer cancel()
			gen, roundErr = d.watchRound(rctx, watched[0].s, start)
		}()
	}
	found := make([]*mvccpb.KeyValue, len(entries))
	segs := (len(entries) + segmentSize - 1) / segmentSize
	segErrs := make([]error, segs)
	for g := range segs {
		lo, hi := g*segmentSize, min((g+1)*segmentSize, len(entries))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			segErrs[g] = read(lctx, entries[lo:hi], found[lo:hi])
		}()
	}
	wg.Wait()

	for j, e := range entries {
		switch {
		case renewed[e.s] != nil:
			errs[index[j]] = renewed[e.s]
		case segErrs[j/segmentSize] != nil:
			errs[index[j]] = d.report(ctx, segErrs[j/segmentSize])
		default:
			errs[index[j]] = d.confirmFound(ctx, e, found[j], start)
		}
	}

	// The covered locks: proven by the round, or read now if it failed.
	var unproven []*entry
	var unprovenIndex []int
	for j, e := range watched {
		switch {
		case renewed[e.s] != nil:
			errs[watchedIndex[j]] = renewed[e.s]
		case roundErr == nil:
			if ok, err := d.confirmWatched(e, gen, start); ok {
				errs[watchedIndex[j]] = d.whyLost(ctx, e, err)
				continue
			}
			fallthrough
		default:
			unproven = append(unproven, e)
			unprovenIndex = append(unprovenIndex, watchedIndex[j])
		}
	}
	if len(unproven) > 0 {
		found := make([]*mvccpb.KeyValue, len(unproven))
		err := d.getKeys(lctx, unproven, found)
		for j, e := range unproven {
			if err != nil {
				errs[unprovenIndex[j]] = d.report(ctx, err)
				continue
			}
			errs[unprovenIndex[j]] = d.confirmFound(ctx, e, found[j], start)
		}
	}
	return errs
}

// splitCovered moves the entries the refresh watch covers out of entries
// into watched (see refreshwatch.go), with their indexes, and marks the rest
// for the watch before they are read, so that the read covers them.
func (d *Driver) splitCovered(entries []*entry, index []int) (rest []*entry, restIndex []int, watched []*entry, watchedIndex []int) {
	d.held.Lock()
	defer d.held.Unlock()
	if !d.watchingLocked() {
		return entries, index, nil, nil
	}
	rest, restIndex = entries[:0], index[:0]
	for j, e := range entries {
		if d.coveredLocked(e) {
			watched = append(watched, e)
			watchedIndex = append(watchedIndex, index[j])
			continue
		}
		d.markLocked(e)
		rest = append(rest, e)
		restIndex = append(restIndex, index[j])
	}
	return rest, restIndex, watched, watchedIndex
}

// roundContext bounds a watch round to half the time its refresh has left,
// so that a round whose sentinel event does not come (a stalled watch)
// leaves the other half to read the keys instead.
func roundContext(ctx context.Context, start time.Time) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, start.Add(deadline.Sub(start)/2))
}

// sortByKey sorts entries by key, so that a segment of them is read as one key
// range, and index with them.
func sortByKey(entries []*entry, index []int) ([]*entry, []int) {
	order := make([]int, len(entries))
	for j := range order {
		order[j] = j
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(entries[a].key, entries[b].key) })
	sorted, sortedIndex := make([]*entry, len(entries)), make([]int, len(entries))
	for j, o := range order {
		sorted[j], sortedIndex[j] = entries[o], index[o]
	}
	return sorted, sortedIndex
}

// segmentSize is how many locks of a batch one goroutine reads, as a key range
// (see readKeys) or in transactions (getKeys).
const segmentSize = 2048

// denseBatch reports whether a batch of n locks is likely dense enough in the
// key space for range reads (readKeys): when it holds at least half of this
// Driver's requests. The batches of many locks taken over time are not: each
// holds the locks that fell due in one scheduler pass, spread over the whole
// key space, and a range read from its first key to its last walks every key
// in between (etcd 3.4 walks the whole span of a range read even with a
// limit) only to find few of them ours: measured on 100,000 keys, a page of
// 1,024 keys over a span of 50,000 cost 10 us a key, a dense range 2 us and
// a transaction of single-key reads 15 us (wall time, one read in flight).
// Read that way, a driver holding 50,000 locks taken over a minute spent
// etcd's whole core on refresh reads, and lost them. A sparse batch reads its
// keys one by one instead.
func (d *Driver) denseBatch(n int) bool {
	d.held.Lock()
	defer d.held.Unlock()
	total := 0
	for _, s := range d.leases {
		total += s.entries
	}
	return 2*n >= total
}

// scanPage is the most keys one range read of readKeys returns.
const scanPage = 1024

// readKeys reads the keys of seg, sorted by key, and sets found[i] to seg[i]'s
// key as it is in etcd, or leaves it nil if there is no such key.
//
// It reads the whole key range from seg's first key to its last, keys only,
// in pages of scanPage keys: one range read costs etcd a fraction of a
// transaction of as many single-key reads (about a sixth, measured on etcd
// 3.4 for 20,000 keys). Each page is a linearizable read sent after the
// refresh started, and it returns every key of its range up to its last one,
// so a key of seg at or before that last key which it does not return did not
// exist at that read: the same proof as a read of the key alone. The range
// holds other locks' keys too (other clients', waiters'); where they fill a
// page with few of seg's keys, the rest of seg is read key by key instead.
func (d *Driver) readKeys(ctx context.Context, seg []*entry, found []*mvccpb.KeyValue) error {
	end := seg[len(seg)-1].key + "\x00"
	i := 0
	for i < len(seg) {
		resp, err := d.c.Get(ctx, seg[i].key, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(scanPage))
		if err != nil {
			return err
		}
		kvs := resp.Kvs
		if resp.More && len(kvs) == 0 {
			break // not a page etcd returns; read the rest key by key
		}
		covered := end // every key before covered is in kvs or absent
		if resp.More {
			covered = string(kvs[len(kvs)-1].Key) + "\x00"
		}
		first, k := i, 0
		for ; i < len(seg) && seg[i].key < covered; i++ {
			for k < len(kvs) && string(kvs[k].Key) < seg[i].key {
				k++
			}
			if k < len(kvs) && string(kvs[k].Key) == seg[i].key {
				found[i] = kvs[k]
			}
		}
		if resp.More && i-first < scanPage/8 {
			break // mostly other keys: reading ours alone is cheaper
		}
	}
	return d.getKeys(ctx, seg[i:], found[i:])
}

// getKeys reads the keys of seg one by one, in transactions of maxTxnOps reads,
// and sets found[i] to seg[i]'s key, or nil if there is none.
func (d *Driver) getKeys(ctx context.Context, seg []*entry, found []*mvccpb.KeyValue) error {
	for lo := 0; lo < len(seg); lo += maxTxnOps {
		hi := min(lo+maxTxnOps, len(seg))
		ops := make([]clientv3.Op, 0, hi-lo)
		for _, e := range seg[lo:hi] {
			ops = append(ops, clientv3.OpGet(e.key))
		}
		resp, err := d.c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		for i, r := range resp.Responses {
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				found[lo+i] = kvs[0]
			}
		}
	}
	return nil
}

// maxReadsInFlight bounds the reads one RefreshBatch has in flight: enough that
// a batch of many thousands of locks takes a few round trips, few enough not to
// crowd out the other clients of the server.
const maxReadsInFlight = 16

// renewFor makes sure s's lease outlives the validity the portable layer will
// count for a lock of ttl refreshed at start (start + ttl less the drift):
// when the session's deadline falls short of it, it renews the lease, with a
// keepalive sent after start. Concurrent refreshes share one keepalive: one
// in flight that was sent after start serves this refresh too, so a Driver
// holding many locks sends about one keepalive per round trip, not one per
// refresh batch.
func (d *Driver) renewFor(ctx context.Context, s *session, ttl time.Duration, start time.Time) error {
	for {
		d.held.Lock()
		if !s.deadlineLocked().Before(start.Add(ttl - driver.Drift(ttl))) {
			d.held.Unlock()
			return nil
		}
		r := s.renewing
		mine := r == nil || r.sent.Before(start)
		if mine {
			r = &renewal{sent: time.Now(), done: make(chan struct{})}
			s.renewing = r
		}
		d.held.Unlock()
		if mine {
			r.err = s.keepaliveCtx(ctx)
			d.held.Lock()
			if s.renewing == r {
				s.renewing = nil
			}
			d.held.Unlock()
			close(r.done)
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return d.report(ctx, ctx.Err())
		}
		switch {
		case r.err == nil:
			return nil
		case !mine && isContextErr(r.err) && ctx.Err() == nil:
			// The refresh that sent it gave up; ours still has time: try again.
			continue
		default:
			return d.report(ctx, r.err)
		}
	}
}

// A renewal is one keepalive of a session's lease in flight, which every
// refresh that started before it was sent may wait for instead of sending its
// own. sent is taken before the keepalive is sent (keepaliveCtx records its
// own, later, send time as the lease's confirmed time).
type renewal struct {
	sent time.Time
	done chan struct{}
	err  error // set before done is closed
}

func (d *Driver) heldEntry(req *driver.Request) (*entry, error) {
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.OpenLocked(); err != nil {
		return nil, err
	}
	e := d.lookupLocked(req)
	if e == nil || e.state != stateHeld {
		return nil, driver.ErrNotHeld
	}
	return e, nil
}

// confirm checks a read of e's key, sent after start, and records the
// refresh; the read covers e if the watch marked it before the read was sent
// (splitCovered).
func (d *Driver) confirm(e *entry, kvs []*mvccpb.KeyValue, start time.Time) error {
	d.held.Lock()
	defer d.held.Unlock()
	switch {
	case e.state != stateHeld:
		return driver.ErrNotHeld
	case len(kvs) == 0:
		return d.lostKeyLocked(e, errVanished)
	case kvs[0].CreateRevision != e.rev || kvs[0].Lease != int64(e.s.id):
		return d.lostKeyLocked(e, errReplaced)
	}
	d.paidLocked(e, start)
	if e.gone == goneUnconfirmed {
		e.gone = goneNot
	}
	return nil
}

// confirmFound is confirm of a read that found kv (nil: no key), with the
// cause of a loss (whyLost).
func (d *Driver) confirmFound(ctx context.Context, e *entry, kv *mvccpb.KeyValue, start time.Time) error {
	var kvs []*mvccpb.KeyValue
	if kv != nil {
		kvs = []*mvccpb.KeyValue{kv}
	}
	return d.whyLost(ctx, e, d.confirm(e, kvs, start))
}

// lostKeyLocked forgets e, whose key a refresh found gone (why: errVanished)
// or replaced (errReplaced); d.held is locked.
func (d *Driver) lostKeyLocked(e *entry, why error) error {
	d.removeLocked(e)
	return fmt.Errorf("%w: %w: %s", driver.ErrNotHeld, why, e.key)
}

// paidLocked records a refresh of e confirmed from start; d.held is locked.
func (d *Driver) paidLocked(e *entry, start time.Time) {
	if paid := start.Sub(d.epoch) + e.req.TTL; paid > e.paidUntil {
		e.paidUntil = paid
	}
}

// confirmWatched checks what the watch of generation gen saw of e's key, up
// to a round sent after start, and records the refresh. ok is false when the
// watch no longer covers e: its key must be read instead.
func (d *Driver) confirmWatched(e *entry, gen uint32, start time.Time) (ok bool, err error) {
	d.held.Lock()
	defer d.held.Unlock()
	switch {
	case e.state != stateHeld:
		return true, driver.ErrNotHeld
	case e.watched != gen || e.gone == goneUnconfirmed:
		return false, nil
	case e.gone == goneVanished:
		return true, d.lostKeyLocked(e, errVanished)
	case e.gone == goneReplaced:
		return true, d.lostKeyLocked(e, errReplaced)
	}
	d.paidLocked(e, start)
	return true, nil
}

// errVanished is why confirm finds a held lock lost: its key is gone;
// errReplaced (which matches it too): another lock's key is in its place.
var (
	errVanished = errors.New("etcddriver: key is gone (deleted, or its lease ended)")
	errReplaced = fmt.Errorf("%w: another lock holds the key", errVanished)
)

// whyLost passes err on, unless it says e's key vanished: then it adds the
// cause. ForceRelease left a tombstone for it: driver.ErrForceReleased; its
// lease is gone: driver.ErrSessionExpired; another lock's key is there:
// driver.ErrTakenOver; else (the key was deleted): driver.ErrExpired. Only
// the rare refresh that finds its key gone pays the reads.
func (d *Driver) whyLost(ctx context.Context, e *entry, err error) error {
	if !errors.Is(err, errVanished) {
		return err
	}
	d.held.Lock()
	rev, lease := e.rev, e.s.id
	d.held.Unlock()
	ctx = requireLeader(ctx)
	if d.forced(ctx, e.key, rev) {
		return fmt.Errorf("%w: %w: etcddriver: key %s was deleted by ForceRelease", driver.ErrNotHeld, driver.ErrForceReleased, e.key)
	}
	if ttl, lerr := d.c.TimeToLive(ctx, lease); lerr == nil && ttl.TTL < 0 {
		return fmt.Errorf("%w: %w", err, errLeaseGone)
	}
	if errors.Is(err, errReplaced) {
		return fmt.Errorf("%w: %w", err, driver.ErrTakenOver)
	}
	return fmt.Errorf("%w: %w", err, driver.ErrExpired)
}
