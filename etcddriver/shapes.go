package etcddriver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
)

// Read-write locks and semaphores share the mutex's queue: every request of
// every shape is one key in the lock's range, ordered by create revision. The
// shape of a key is in its name, after the range:
//
//	<lease hex>[_<i>]              exclusive (the mutex's name, concurrency.Mutex's)
//	read/<lease hex>[_<i>]         shared (the name recipes.RWMutex gives readers)
//	sem/<n>/<lease hex>[_<i>]      one permit of a semaphore of n
//
// so that one range read, filtered by name, finds what a request waits for:
// a writer every earlier key, a reader the last earlier key that is not a
// reader, a permit the earlier keys while there are n or more of them. Any
// other name (concurrency.Mutex's, etcdctl lock's, recipes.RWMutex's writers,
// anything written by others) reads as exclusive, which waits for all before it
// and holds back all after it: the safe reading.
const (
	readName = "read/"
	semName  = "sem/"
)

// Shapes of a key or request, as keyShape and reqShape give them: n >= 2 is a
// permit of a semaphore of n.
const (
	shapeExclusive = 0
	shapeShared    = -1
)

// namePrefix is the part of a request's key name that says its shape.
func namePrefix(req *driver.Request) string {
	switch {
	case req.Shared:
		return readName
	case req.Permits >= 2:
		return semName + strconv.Itoa(req.Permits) + "/"
	}
	return ""
}

func reqShape(req *driver.Request) int {
	switch {
	case req.Shared:
		return shapeShared
	case req.Permits >= 2:
		return req.Permits
	}
	return shapeExclusive
}

// keyShape reads the shape of a key in the range rng from its name.
func keyShape(rng string, key []byte) int {
	if len(key) < len(rng) {
		return shapeExclusive
	}
	name := key[len(rng):]
	switch {
	case bytes.HasPrefix(name, []byte(readName)):
		return shapeShared
	case bytes.HasPrefix(name, []byte(semName)):
		name = name[len(semName):]
		i := bytes.IndexByte(name, '/')
		if i <= 0 || i > 10 {
			return shapeExclusive
		}
		n, err := strconv.Atoi(string(name[:i]))
		if err != nil || n < 2 || strconv.Itoa(n) != string(name[:i]) {
			return shapeExclusive
		}
		return n
	}
	return shapeExclusive
}

// describeShape names a shape for an error message.
func describeShape(s int) string {
	switch s {
	case shapeExclusive:
		return "an exclusive lock"
	case shapeShared:
		return "a shared lock"
	}
	return fmt.Sprintf("a semaphore of %d permits", s)
}

// mismatch returns the ErrInvalidArgument to report when a request of shape
// want meets, among the keys it waits for, one of a shape that cannot share
// the key with it: a semaphore of another n, a semaphore and a read-write lock.
// Only semaphores are told apart: exclusive and shared requests mix by design.
func mismatch(rng string, want int, kvs []*mvccpb.KeyValue) error {
	for _, kv := range kvs {
		got := keyShape(rng, kv.Key)
		if got == want || (want <= 0 && got <= 0) {
			continue
		}
		return fmt.Errorf("%w: etcddriver: the key is in use as %s, asked for as %s (every user of a key must use the same number of permits)",
			driver.ErrInvalidArgument, describeShape(got), describeShape(want))
	}
	return nil
}

// readerRanges are the two ranges of rng holding every key but the readers':
// [rng, rng+"read/") and [past rng+"read/", past rng).
func readerRanges(rng string) (start1, end1, start2, end2 string) {
	return rng, rng + readName, clientv3.GetPrefixRangeEnd(rng + readName), clientv3.GetPrefixRangeEnd(rng)
}

// freeCmps are true when e's exclusive or shared request may take its lock at
// once, with no one to pass: nobody in the lock's range, or, for a reader, no
// exclusive key (a waiting writer holds back new readers).
func freeCmps(e *entry) []clientv3.Cmp {
	if !e.req.Shared {
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.rng()), "=", 0).WithPrefix()}
	}
	s1, e1, s2, e2 := readerRanges(e.rng())
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s1), "=", 0).WithRange(e1),
		clientv3.Compare(clientv3.CreateRevision(s2), "=", 0).WithRange(e2)}
}

// blockerOps read what a request of e's shape waits for, among the keys created
// before rev (every key but ours when rev is 0, in the transaction that writes
// ours): for a reader the last key of each non-reader range, for a permit every
// key (names and revisions only).
func blockerOps(e *entry, shape int, rev int64, serializable bool) []clientv3.Op {
	opts := func(o ...clientv3.OpOption) []clientv3.OpOption {
		if rev > 0 {
			o = append(o, clientv3.WithMaxCreateRev(rev-1))
		}
		if serializable {
			o = append(o, clientv3.WithSerializable())
		}
		return o
	}
	if shape == shapeShared {
		s1, e1, s2, e2 := readerRanges(e.rng())
		last := func(end string) []clientv3.OpOption {
			return opts(clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		}
		return []clientv3.Op{clientv3.OpGet(s1, last(e1)...), clientv3.OpGet(s2, last(e2)...)}
	}
	return []clientv3.Op{clientv3.OpGet(e.rng(), opts(clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))...)}
}

// blockersOf picks, from the answers to blockerOps, the keys created before rev
// that the request waits for: a reader's last earlier non-reader (or none), a
// permit's earlier keys, oldest first.
func blockersOf(resps []*etcdserverpb.ResponseOp, shape int, rev int64) []*mvccpb.KeyValue {
	var out []*mvccpb.KeyValue
	for _, r := range resps {
		for _, kv := range r.GetResponseRange().Kvs {
			if kv.CreateRevision >= rev {
				continue
			}
			if shape == shapeShared && len(out) > 0 {
				if kv.CreateRevision > out[0].CreateRevision {
					out[0] = kv
				}
				continue
			}
			out = append(out, kv)
		}
	}
	return out
}

// admitted reports whether a request of the shape that waits for blockers is
// granted: a reader when no writer is before it, a permit of n when fewer than
// n keys are.
func admitted(shape int, blockers []*mvccpb.KeyValue) bool {
	if shape == shapeShared {
		return len(blockers) == 0
	}
	return len(blockers) < shape
}

// tryShaped is TryAcquire's path for a reader or a permit. A reader's is one
// transaction that writes its key only if no writer holds or waits (writer
// preference: a waiting writer holds back new readers). A permit's writes its
// key and reads the keys before it in one transaction, and deletes it again
// when n or more are there: etcd cannot compare a count.
func (d *Driver) tryShaped(ctx context.Context, e *entry) (driver.Grant, error) {
	shape := reqShape(e.req)
	for round := 0; ; round++ {
		sent := time.Now()
		put := clientv3.OpPut(e.key, e.value, clientv3.WithLease(e.s.id))
		txn := d.c.Txn(ctx)
		if shape == shapeShared {
			txn = txn.If(freeCmps(e)...).
				Then(put).
				Else(append([]clientv3.Op{clientv3.OpGet(e.key)}, blockerOps(e, shape, 0, false)...)...)
		} else {
			txn = txn.If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", 0)).
				Then(append([]clientv3.Op{put}, blockerOps(e, shape, 0, false)...)...).
				Else(clientv3.OpGet(e.key))
		}
		resp, err := txn.Commit()
		if err != nil {
			return driver.Grant{}, d.failed(e, err)
		}
		if resp.Succeeded {
			rev := resp.Header.Revision
			d.setRev(e, rev)
			if shape == shapeShared {
				return d.hold(e, rev, sent)
			}
			blockers := blockersOf(resp.Responses[1:], shape, rev)
			if err := mismatch(e.rng(), shape, blockers); err != nil {
				return driver.Grant{}, d.withdraw(ctx, e, err)
			}
			if admitted(shape, blockers) {
				return d.hold(e, rev, sent)
			}
			return driver.Grant{}, d.withdraw(ctx, e, driver.ErrLocked)
		}
		mine := resp.Responses[0].GetResponseRange().Kvs
		if len(mine) == 0 {
			// Only a reader gets here: a writer holds or waits.
			d.forget(e)
			if err := mismatch(e.rng(), shape, blockersOf(resp.Responses[1:], shape, math.MaxInt64)); err != nil {
				return driver.Grant{}, err
			}
			return driver.Grant{}, driver.ErrLocked
		}
		kv := mine[0]
		if string(kv.Value) != e.value {
			// A key of ours that no request owns any more (its delete failed):
			// remove it and look again.
			if round == 0 {
				if err := d.deleteStale(ctx, e, kv); err != nil {
					return driver.Grant{}, d.failed(e, err)
				}
				continue
			}
			d.forget(e)
			return driver.Grant{}, driver.ErrLocked
		}
		// Our own key, from an earlier attempt of this request.
		d.setRev(e, kv.CreateRevision)
		blockers, _, sent, err := d.checkShaped(ctx, e, shape, false)
		if err != nil {
			return driver.Grant{}, d.failed(e, err)
		}
		if err := mismatch(e.rng(), shape, blockers); err != nil {
			return driver.Grant{}, d.withdraw(ctx, e, err)
		}
		if admitted(shape, blockers) {
			return d.hold(e, e.rev, sent)
		}
		d.abandon(e)
		return driver.Grant{}, driver.ErrLocked
	}
}

// withdraw deletes e's key, which must not stay queued, and returns err. The
// delete is made now, so that the caller's next request does not find it; if
// it fails, abandon retries it in the background.
func (d *Driver) withdraw(ctx context.Context, e *entry, err error) error {
	d.held.Lock()
	rev := e.rev
	d.held.Unlock()
	if _, derr := d.deleteIf(ctx, e, rev); derr != nil {
		d.abandon(e)
		return err
	}
	d.forget(e)
	return err
}

// enqueueShaped is Acquire's path for a reader or a permit: write our key and
// read what it waits for in one transaction (one round trip when it is
// admitted at once), then wait, woken by watches, until it is admitted.
func (d *Driver) enqueueShaped(ctx context.Context, e *entry) (driver.Grant, error) {
	shape := reqShape(e.req)
	var (
		blockers []*mvccpb.KeyValue
		known    int64 // a revision at which blockers were read
		sent     time.Time
	)
	for round := 0; ; round++ {
		sent = time.Now()
		resp, err := d.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", 0)).
			Then(append([]clientv3.Op{clientv3.OpPut(e.key, e.value, clientv3.WithLease(e.s.id))}, blockerOps(e, shape, 0, false)...)...).
			Else(clientv3.OpGet(e.key)).
			Commit()
		if err != nil {
			return driver.Grant{}, d.failed(e, err)
		}
		if resp.Succeeded {
			known = resp.Header.Revision
			d.setRev(e, known)
			blockers = blockersOf(resp.Responses[1:], shape, known)
			break
		}
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		if string(kv.Value) == e.value {
			// Written by an earlier attempt of this request: keep its place.
			d.setRev(e, kv.CreateRevision)
			blockers, known, sent, err = d.checkShaped(ctx, e, shape, false)
			if err != nil {
				return driver.Grant{}, d.failed(e, err)
			}
			break
		}
		if round > 0 {
			return driver.Grant{}, d.failed(e, fmt.Errorf("etcddriver: key %s keeps being taken by another request of this lease", e.key))
		}
		if err := d.deleteStale(ctx, e, kv); err != nil {
			return driver.Grant{}, d.failed(e, err)
		}
	}

	ctx, stop := d.untilClosed(ctx)
	defer stop()
	waitFailed := func(err error) error {
		if err = d.failed(e, err); errors.Is(err, errSessionEnded) {
			return errLeaseLostWaiting
		}
		return err
	}
	for {
		if err := mismatch(e.rng(), shape, blockers); err != nil {
			return driver.Grant{}, d.withdraw(ctx, e, err)
		}
		if admitted(shape, blockers) {
			g, err := d.hold(e, e.rev, sent)
			if err != nil {
				return driver.Grant{}, waitFailed(err)
			}
			return g, nil
		}
		var err error
		if shape == shapeShared {
			err = d.waitDelete(ctx, e, blockers[0], known)
		} else {
			err = d.waitFewer(ctx, e, shape, len(blockers), known)
		}
		if err != nil {
			return driver.Grant{}, waitFailed(err)
		}
		blockers, known, sent, err = d.checkShaped(ctx, e, shape, true)
		if err != nil {
			return driver.Grant{}, waitFailed(err)
		}
	}
}

// checkShaped is check for a reader or a permit: in one read transaction it
// confirms that our key still exists with our create revision and lease, and
// reads what it waits for. As in check, the read is served by the member first
// (serializable); a read that finds our key gone, or, after a wake-up, finds us
// still kept out (a member behind may still show the key whose delete woke
// us), is repeated linearizably before it counts.
func (d *Driver) checkShaped(ctx context.Context, e *entry, shape int, woken bool) (blockers []*mvccpb.KeyValue, known int64, sent time.Time, err error) {
	for _, linearizable := range []bool{false, true} {
		sent = time.Now()
		resp, err := d.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev),
				clientv3.Compare(clientv3.LeaseValue(e.key), "=", e.s.id)).
			Then(blockerOps(e, shape, e.rev, !linearizable)...).
			Commit()
		if err != nil {
			return nil, 0, sent, err
		}
		if !resp.Succeeded {
			if linearizable {
				return nil, 0, sent, errKeyGone
			}
			continue
		}
		blockers = blockersOf(resp.Responses, shape, e.rev)
		if !linearizable && woken && !admitted(shape, blockers) {
			continue
		}
		return blockers, resp.Header.Revision, sent, nil
	}
	panic("unreachable")
}

// waitFewer is a permit's wait: it returns once fewer than n keys before ours
// may remain, of the count seen at revision known. Any of them may go first (a
// permit holder releases when it likes), so the waiter watches the lock's
// range, not one key, and counts the deletes of keys older than its own (their
// previous value gives their create revision); it wakes once enough have gone,
// not at every release. The watch starts at the current revision, as in
// waitDelete, and the keys are counted again when it started later than known,
// and on waitDelete's schedule while etcd 3.4 may still deliver its events
// late. Counting a delete twice only wakes the waiter early: it checks again
// and waits again.
func (d *Driver) waitFewer(ctx context.Context, e *entry, n, count int, known int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := d.c.Watch(wctx, e.rng(), clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	need := count - n + 1 // deletes of older keys that admit us
	var (
		step    = recheckFirst
		timer   = time.NewTimer(step)
		recheck = timer.C
		created time.Time // when etcd confirmed the watch; zero until then
	)
	defer timer.Stop()
	recount := func(linearizable bool) (bool, error) {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.rev - 1)}
		if !linearizable {
			opts = append(opts, clientv3.WithSerializable())
		}
		resp, err := d.c.Get(ctx, e.rng(), opts...)
		if err != nil {
			return false, err
		}
		need = min(need, len(resp.Kvs)-n+1)
		return need <= 0, nil
	}
	for {
		select {
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return errors.New("etcddriver: watch closed")
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("etcddriver: watch: %w", err)
			}
			if wr.Created {
				if wr.Header.Revision != known {
					done, err := recount(true)
					if err != nil || done {
						woke(ctx, err, driver.WakeTimer) // the fallback read, not the watch
						return err
					}
				}
				created = time.Now()
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE && (ev.PrevKv == nil || ev.PrevKv.CreateRevision < e.rev) {
					need--
				}
			}
			if need <= 0 {
				driver.Woke(ctx, driver.WakeNotified)
				return nil
			}
		case <-recheck:
			last := !created.IsZero() && time.Since(created) >= recheckUntil
			done, err := recount(last)
			if err != nil || done {
				woke(ctx, err, driver.WakeTimer)
				return err
			}
			if last {
				recheck = nil
			} else {
				step = min(2*step, recheckMax)
				timer.Reset(step)
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-e.s.lost:
			if d.isClosed() {
				return driver.ErrClosed
			}
			return errSessionEnded
		case <-d.held.Done():
			return driver.ErrClosed
		}
	}
}
