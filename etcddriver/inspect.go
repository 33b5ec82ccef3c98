package etcddriver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// Inspection, eviction and leader election (see the package doc).
//
// A key's value is its request's label and owner, "<label>\n<owner>": the
// label first, so that `etcdctl get` shows an operator the holder's name, and
// the owner (unique per request) last, where the acquisition's retry and
// cleanup recognise their own key. A value without a newline was not written
// by this driver (concurrency.Mutex and etcdctl lock write ""): it reads as a
// label of its own text, or of the key's name when empty.

// keyValue is the value a request's key holds.
func keyValue(label, owner string) string { return label + "\n" + owner }

// splitValue reads a key's value as keyValue wrote it; ok is false for a value
// this driver did not write.
func splitValue(v []byte) (label, owner string, ok bool) {
	i := strings.LastIndexByte(string(v), '\n')
	if i < 0 {
		return "", "", false
	}
	return string(v[:i]), string(v[i+1:]), true
}

// forcedName is the component, beside the escaped user keys under the prefix,
// that holds the tombstones ForceRelease leaves: "!" is never part of an
// escaped key, so no lock's range contains them, and neither this driver nor
// concurrency.Mutex counts them as contenders.
const forcedName = "!forced"

// tombstoneKey is the tombstone ForceRelease leaves for the evicted key key
// (a full etcd key under prefix) of create revision rev:
// <prefix>/!forced/<escaped key>/<name>@<rev>.
func tombstoneKey(prefix, key string, rev int64) string {
	return prefix + "/" + forcedName + "/" + strings.TrimPrefix(key, prefix+"/") + "@" + strconv.FormatInt(rev, 10)
}

// forceReleaseRounds bounds how often ForceRelease reads the holders again
// when they changed between its read and its delete.
const forceReleaseRounds = 8

// holdersOf applies the queueing rule (see Read-write locks and semaphores)
// to a lock's range, read in create revision order: the first key holds; so do
// the readers before the first key that is not a reader, or the first n
// permits of a semaphore of n. It returns how many of kvs hold, and the
// semaphore's n (0 when the key is not one).
func holdersOf(rng string, kvs []*mvccpb.KeyValue) (n, permits int) {
	if len(kvs) == 0 {
		return 0, 0
	}
	switch shape := keyShape(rng, kvs[0].Key); {
	case shape == shapeShared:
		for n < len(kvs) && keyShape(rng, kvs[n].Key) == shapeShared {
			n++
		}
		return n, 0
	case shape >= 2:
		return min(shape, len(kvs)), shape
	}
	return 1, 0
}

// Inspect implements driver.Inspector with one read of the lock's range and,
// for Expires, one TimeToLive per distinct lease among the holders. Since is
// zero: etcd records no time (the portable layer reads the holder's label).
func (d *Driver) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if d.isClosed() {
		return driver.Info{}, driver.ErrClosed
	}
	ctx = requireLeader(ctx)
	rng := rangePrefix(d.prefix, key)
	resp, err := d.c.Get(ctx, rng, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return driver.Info{}, d.report(ctx, err)
	}
	n, permits := holdersOf(rng, resp.Kvs)
	in := driver.Info{Waiters: len(resp.Kvs) - n, Permits: permits}
	expires := map[int64]time.Time{}
	for _, kv := range resp.Kvs[:n] {
		h := driver.Holder{Shared: keyShape(rng, kv.Key) == shapeShared, Token: uint64(kv.CreateRevision)}
		label, owner, ours := splitValue(kv.Value)
		switch {
		case ours:
			h.Label, h.Owner = label, owner
		case len(kv.Value) > 0:
			h.Label, h.Owner = string(kv.Value), string(kv.Key)
		default:
			h.Label, h.Owner = strings.TrimPrefix(string(kv.Key), rng), string(kv.Key)
		}
		if kv.Lease != 0 {
			t, seen := expires[kv.Lease]
			if !seen {
				sent := time.Now()
				ttl, err := d.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
				if err != nil {
					return driver.Info{}, d.report(ctx, err)
				}
				// A lease that expired since the read ends the hold now.
				t = sent.Add(time.Duration(max(ttl.TTL, 0)) * time.Second)
				expires[kv.Lease] = t
			}
			h.Expires = t
		}
		in.Holders = append(in.Holders, h)
		in.Token = max(in.Token, h.Token)
	}
	return in, nil
}

// List implements driver.Lister: a keys-only read of the prefix's range (in
// pages), every lock's range that has a key in it being held (its first key
// holds, by the queueing rule).
func (d *Driver) List(ctx context.Context, prefix string) ([]string, error) {
	if d.isClosed() {
		return nil, driver.ErrClosed
	}
	ctx = requireLeader(ctx)
	base := d.prefix + "/"
	// Escaping maps byte by byte and is a prefix code, so the escaped keys
	// that start with the escaped prefix are exactly the escapes of the keys
	// that start with prefix.
	start := base + escapeKey(prefix)
	end := clientv3.GetPrefixRangeEnd(start)
	var keys []string
	for {
		resp, err := d.c.Get(ctx, start, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(listPage))
		if err != nil {
			return nil, d.report(ctx, err)
		}
		for _, kv := range resp.Kvs {
			rest := strings.TrimPrefix(string(kv.Key), base)
			i := strings.IndexByte(rest, '/')
			if i < 0 {
				continue // not a contender: a key named like a lock's range
			}
			k, ok := unescapeKey(rest[:i])
			if !ok || (len(keys) > 0 && keys[len(keys)-1] == k) {
				continue
			}
			keys = append(keys, k)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return keys, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// listPage is how many keys one read of List returns.
var listPage int64 = 1000 // a variable for the test of paging

// unescapeKey inverts escapeKey; ok is false for a component escapeKey cannot
// have written (the tombstones' !forced, keys written by others).
func unescapeKey(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if !keepByte(c) {
				return "", false
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || strings.ToUpper(s[i+1:i+3]) != s[i+1:i+3] || keepByte(byte(v)) {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// ForceRelease implements driver.Evictor. In one transaction on the holders'
// create revisions it deletes their keys and writes, for each, a tombstone on
// a lease of its own (tombstoneKey), which the evicted holder's driver reads
// when its refresh finds its key gone, to report driver.ErrForceReleased.
// Waiters keep their places: the next grant goes to a key created after the
// evicted ones, so its token (create revision) is larger. The holders' leases
// are not revoked: they carry the holders' other locks.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if d.isClosed() {
		return 0, driver.ErrClosed
	}
	ctx = requireLeader(ctx)
	rng := rangePrefix(d.prefix, key)
	for round := 1; ; round++ {
		resp, err := d.c.Get(ctx, rng, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return 0, d.report(ctx, err)
		}
		n, _ := holdersOf(rng, resp.Kvs)
		if n == 0 {
			return 0, driver.ErrNotHeld
		}
		done, err := d.evict(ctx, resp.Kvs[:n])
		if err != nil {
			return 0, d.report(ctx, err)
		}
		if done {
			return n, nil
		}
		if round == forceReleaseRounds {
			return 0, fmt.Errorf("%w: etcddriver: the holders of %q changed %d times during ForceRelease", driver.ErrUnavailable, key, round)
		}
	}
}

// evict deletes holders, each only if still of the create revision read, and
// leaves their tombstones, in transactions of at most maxTxnOps operations;
// done is false when the first found the holders changed.
func (d *Driver) evict(ctx context.Context, holders []*mvccpb.KeyValue) (done bool, err error) {
	// The tombstones' lease lives kit.TombstoneLife of the longest of the
	// evicted holders' lease TTLs, or of an unknown TTL for a key written
	// without a lease.
	life := kit.TombstoneMin
	seen := map[int64]bool{}
	for _, kv := range holders {
		switch {
		case kv.Lease == 0:
			life = max(life, kit.TombstoneLife(0))
			continue
		case seen[kv.Lease]:
			continue
		}
		seen[kv.Lease] = true
		ttl, err := d.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return false, err
		}
		life = max(life, kit.TombstoneLife(time.Duration(ttl.GrantedTTL)*time.Second))
	}
	g, err := d.c.Grant(ctx, int64((life+time.Second-1)/time.Second))
	if err != nil {
		return false, err
	}
	const per = maxTxnOps / 2 // a delete and a put per holder
	for i := 0; i < len(holders); i += per {
		chunk := holders[i:min(i+per, len(holders))]
		var (
			cmps []clientv3.Cmp
			ops  []clientv3.Op
		)
		for _, kv := range chunk {
			k := string(kv.Key)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", kv.CreateRevision))
			ops = append(ops, clientv3.OpDelete(k), clientv3.OpPut(tombstoneKey(d.prefix, k, kv.CreateRevision), "", clientv3.WithLease(g.ID)))
		}
		resp, err := d.c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return false, err
		}
		if !resp.Succeeded && i == 0 {
			_, _ = d.c.Revoke(ctx, g.ID) // nothing written on it
			return false, nil
		}
	}
	return true, nil
}

// forced reports whether ForceRelease left a tombstone for key of create
// revision rev. A failed read reports no: the loss is then reported as any
// vanished key's.
func (d *Driver) forced(ctx context.Context, key string, rev int64) bool {
	resp, err := d.c.Get(ctx, tombstoneKey(d.prefix, key, rev), clientv3.WithCountOnly())
	return err == nil && resp.Count > 0
}

// Relabel implements driver.Labeler: a put of the new label on our key with
// our lease, in a transaction on the key's create revision and lease, so it
// never touches another holder's key. The create revision (the token) stays.
func (d *Driver) Relabel(ctx context.Context, req *driver.Request, label string) error {
	e, err := d.heldEntry(req)
	if err != nil {
		return err
	}
	resp, err := d.c.Txn(requireLeader(ctx)).
		If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev),
			clientv3.Compare(clientv3.LeaseValue(e.key), "=", e.s.id)).
		Then(clientv3.OpPut(e.key, keyValue(label, e.req.Owner), clientv3.WithLease(e.s.id))).
		Commit()
	if err != nil {
		return d.report(ctx, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: etcddriver: key %s is gone", driver.ErrNotHeld, e.key)
	}
	return nil
}

// Watch implements driver.Watcher with an etcd watch of the lock's range:
// every put (a new request, a relabelling) and delete (a release, an expiry,
// an eviction, a waiter leaving) signals. When etcd ends the watch (a
// compaction, a member without a leader) it signals and watches again.
func (d *Driver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	rng := rangePrefix(d.prefix, key)
	ctx, stop := d.untilClosed(ctx)
	c := make(chan struct{}, 1)
	signal := func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	created := make(chan struct{})
	d.held.Lock()
	if d.held.ClosedLocked() {
		d.held.Unlock()
		stop()
		return nil, driver.ErrClosed
	}
	d.wg.Add(1)
	d.held.Unlock()
	go func() {
		defer d.wg.Done()
		defer close(c)
		defer stop()
		first := true
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(ctx)
			wch := d.c.Watch(wctx, rng, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			for wr := range wch {
				if wr.Created && first {
					first = false
					close(created)
				}
				if wr.Err() != nil {
					break
				}
				if len(wr.Events) > 0 {
					signal()
				}
			}
			cancel()
			if ctx.Err() != nil {
				break
			}
			signal() // a change may have been missed in between
			select {
			case <-ctx.Done():
			case <-time.After(watchRetry):
			}
		}
		if first {
			close(created)
		}
	}()
	// Changes after Watch returns must signal: wait until etcd confirmed the
	// watch (or it ended).
	select {
	case <-created:
	case <-ctx.Done():
	}
	return c, nil
}

// watchRetry is the pause before Watch watches again after etcd ended its
// watch.
const watchRetry = 100 * time.Millisecond

var (
	_ driver.Inspector = (*Driver)(nil)
	_ driver.Lister    = (*Driver)(nil)
	_ driver.Evictor   = (*Driver)(nil)
	_ driver.Labeler   = (*Driver)(nil)
	_ driver.Watcher   = (*Driver)(nil)
)
