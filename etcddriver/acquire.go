package etcddriver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
)

// errSessionEnded is returned when the lease a request was using ended under it;
// the request may try again on a new lease.
var errSessionEnded = errors.New("etcddriver: the lease ended while acquiring")

// errKeyGone is returned by a waiter whose own key vanished while it waited: its
// lease expired or was revoked, or the key was deleted. It must not be told it
// holds the lock (etcd issue #11456, the Jepsen etcd 3.4.3 finding). It lost its
// place in the queue; a new attempt queues again (the error is transient).
var errKeyGone = errors.New("etcddriver: our key vanished while waiting (lease expired or revoked, or key deleted)")

// errLeaseLostWaiting is returned by a waiter whose lease ended while it waited;
// it lost its place in the queue. It is not retried here on a new lease: the
// error is transient, and the portable layer retries.
var errLeaseLostWaiting = errors.New("etcddriver: the lease ended while waiting for the lock")

// sessionAttempts is how many leases one call tries when the first ended before
// the call wrote its key. This is not a retry of a failed request: the driver's
// cached lease turned out to be gone (an operator revoked it, or its keepalives
// had stopped), which etcd answers at once without writing anything, and the
// call then makes its one attempt on a new lease.
const sessionAttempts = 2

// TryAcquire implements driver.Driver: one transaction that writes our key only if
// no one else's is there, so a failed attempt writes nothing.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := d.acquire(requireLeader(ctx), req, false)
	return g, d.report(ctx, err)
}

// Acquire implements driver.Acquirer: it queues a key and, unless it is first,
// watches the key just before it (never the whole queue) until that one is
// deleted.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := d.acquire(requireLeader(ctx), req, true)
	return g, d.report(ctx, err)
}

func (d *Driver) acquire(ctx context.Context, req *driver.Request, wait bool) (driver.Grant, error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, err
		}
		s, err := d.session(ctx, req.TTL)
		if err != nil {
			return driver.Grant{}, err
		}
		g, err := d.acquireOn(ctx, s, req, wait)
		if errors.Is(err, errSessionEnded) && attempt < sessionAttempts {
			continue
		}
		return g, err
	}
}

func (d *Driver) acquireOn(ctx context.Context, s *session, req *driver.Request, wait bool) (driver.Grant, error) {
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return driver.Grant{}, err
	}
	if s.dead != nil {
		d.held.Unlock()
		return driver.Grant{}, errSessionEnded
	}
	e := d.lookupLocked(req)
	switch {
	case e == nil:
		e = d.enterLocked(s, req)
	case e.state == stateHeld:
		// A retry after a lost reply: the same grant.
		g := driver.Grant{Token: uint64(e.rev), Start: d.epoch.Add(e.since)}
		d.held.Unlock()
		return g, nil
	case e.s != s:
		d.held.Unlock()
		return driver.Grant{}, fmt.Errorf("etcddriver: request %q retried with another TTL", req.Key)
	}
	d.held.Unlock()

	shaped := reqShape(req) != shapeExclusive
	switch {
	case !wait && shaped:
		return d.tryShaped(ctx, e)
	case !wait:
		return d.try(ctx, e)
	case shaped:
		return d.enqueueShaped(ctx, e)
	}
	return d.enqueue(ctx, e)
}

// TryAcquireSet implements driver.SetAcquirer with one transaction: it writes
// every request's key, on one lease, only if every lock passes try's test
// (freeCmps: nobody holds or waits, or for a reader no writer does), so all are
// taken or none and a refused set writes nothing. Each token is the create
// revision of its key, the transaction's revision, as try's is. Permits are
// ErrUnsupported (etcd cannot compare a count: a permit is written and then
// counted), and so is a set longer than the server's --max-txn-ops.
func (d *Driver) TryAcquireSet(ctx context.Context, reqs []*driver.Request) ([]driver.Grant, error) {
	if err := driver.CheckSet("etcddriver", reqs); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		grants, wrote, err := d.trySet(requireLeader(ctx), reqs)
		if !wrote && errors.Is(err, errSessionEnded) && attempt < sessionAttempts {
			continue // a cached lease that had ended: nothing was written
		}
		return grants, d.report(ctx, err)
	}
}

// trySet is one attempt of TryAcquireSet; wrote tells that its transaction
// wrote the keys (a lease found ended then is not tried again).
func (d *Driver) trySet(ctx context.Context, reqs []*driver.Request) (grants []driver.Grant, wrote bool, err error) {
	for _, req := range reqs {
		if req.Permits >= 2 || req.TTL != reqs[0].TTL {
			return nil, false, driver.ErrUnsupported
		}
	}
	s, err := d.session(ctx, reqs[0].TTL)
	if err != nil {
		return nil, false, err
	}
	es := make([]*entry, 0, len(reqs))
	var cmps []clientv3.Cmp
	puts := make([]clientv3.Op, len(reqs))
	d.held.Lock()
	switch {
	case d.held.ClosedLocked():
		err = driver.ErrClosed
	case s.dead != nil:
		err = errSessionEnded
	}
	for i, req := range reqs {
		if err != nil || d.lookupLocked(req) != nil { // a retry: TryAcquire finds its key again
			for _, e := range es {
				d.removeLocked(e)
			}
			d.held.Unlock()
			return nil, false, cmp.Or(err, driver.ErrUnsupported)
		}
		es = append(es, d.enterLocked(s, req))
		cmps = append(cmps, freeCmps(es[i])...)
		puts[i] = clientv3.OpPut(es[i].key, es[i].value, clientv3.WithLease(s.id))
	}
	d.held.Unlock()
	sent := time.Now()
	resp, err := d.c.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil && !errors.Is(err, rpctypes.ErrTooManyOps) {
		cause := err
		for _, e := range es {
			err = d.failed(e, cause)
		}
		return nil, false, err
	}
	if err != nil || !resp.Succeeded { // refused whole: nothing was written
		for _, e := range es {
			d.forget(e)
		}
		if err != nil {
			return nil, false, driver.ErrUnsupported
		}
		return nil, false, driver.ErrLocked
	}
	grants = make([]driver.Grant, len(es))
	for i, e := range es {
		if grants[i], err = d.hold(e, resp.Header.Revision, sent); err != nil {
			return nil, true, err // the portable layer releases every request
		}
	}
	return grants, true, nil
}

// try is TryAcquire's transaction: if the lock's range is empty, write our key;
// otherwise read our key (a retry may have written it) and the holder's.
func (d *Driver) try(ctx context.Context, e *entry) (driver.Grant, error) {
	for round := 0; ; round++ {
		sent := time.Now()
		resp, err := d.c.Txn(ctx).
			If(freeCmps(e)...).
			Then(clientv3.OpPut(e.key, e.value, clientv3.WithLease(e.s.id))).
			Else(clientv3.OpGet(e.key), clientv3.OpGet(e.rng(), firstKey...)).
			Commit()
		if err != nil {
			return driver.Grant{}, d.failed(e, err)
		}
		if resp.Succeeded {
			return d.hold(e, resp.Header.Revision, sent)
		}
		mine := resp.Responses[0].GetResponseRange().Kvs
		first := resp.Responses[1].GetResponseRange().Kvs
		if len(mine) == 0 {
			d.forget(e)
			if err := mismatch(e.rng(), shapeExclusive, first); err != nil {
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
		if len(first) > 0 && first[0].CreateRevision == kv.CreateRevision {
			return d.hold(e, kv.CreateRevision, sent)
		}
		d.setRev(e, kv.CreateRevision)
		d.abandon(e)
		return driver.Grant{}, driver.ErrLocked
	}
}

// enqueue is Acquire's path: write our key if it is not there (the layout and
// transaction of concurrency.Mutex), then wait for every earlier key to go.
func (d *Driver) enqueue(ctx context.Context, e *entry) (driver.Grant, error) {
	var (
		pred  *mvccpb.KeyValue // the key just before ours
		known int64            // a revision at which pred existed
		sent  time.Time
	)
	for round := 0; ; round++ {
		sent = time.Now()
		// concurrency.Mutex's transaction: queue our key (or find it from an
		// earlier attempt) and read, keys only, the last two keys of the range
		// by create revision: ours and the one before it, if any. When nobody
		// holds or waits (the common case) that is our key alone, and the
		// lock is held.
		key := e.key
		resp, err := d.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, e.value, clientv3.WithLease(e.s.id)),
				clientv3.OpGet(e.rng(), lastTwoKeys...)).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return driver.Grant{}, d.failed(e, err)
		}
		if resp.Succeeded {
			rev := resp.Header.Revision
			last := resp.Responses[1].GetResponseRange().Kvs // ours, then the one before
			if len(last) < 2 {
				return d.hold(e, rev, sent)
			}
			d.setRev(e, rev)
			pred, known = last[1], rev
			break
		}
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		if string(kv.Value) == e.value {
			// Written by an earlier attempt of this request: keep its place.
			d.setRev(e, kv.CreateRevision)
			var held bool
			pred, known, sent, held, err = d.check(ctx, e, nil)
			if err != nil {
				return driver.Grant{}, d.failed(e, err)
			}
			if held {
				return d.hold(e, e.rev, sent)
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

	// Our key is queued now: losing the lease loses our place. Waiting ends
	// when Close does, also in the middle of a read of a server that does not
	// answer.
	ctx, stop := d.untilClosed(ctx)
	defer stop()
	waitFailed := func(err error) error {
		if err = d.failed(e, err); errors.Is(err, errSessionEnded) {
			return errLeaseLostWaiting
		}
		return err
	}
	for {
		// A writer behind a semaphore's permit: the key is in use as a
		// semaphore (only the key just before ours is seen, so only then).
		if keyShape(e.rng(), pred.Key) > 0 {
			return driver.Grant{}, d.withdraw(ctx, e, mismatch(e.rng(), shapeExclusive, []*mvccpb.KeyValue{pred}))
		}
		if err := d.waitDelete(ctx, e, pred, known); err != nil {
			return driver.Grant{}, waitFailed(err)
		}
		var (
			held bool
			err  error
		)
		pred, known, sent, held, err = d.check(ctx, e, pred)
		if err != nil {
			return driver.Grant{}, waitFailed(err)
		}
		if held {
			g, err := d.hold(e, e.rev, sent)
			if err != nil {
				return driver.Grant{}, waitFailed(err)
			}
			return g, nil
		}
	}
}

// lastTwoKeys reads the last two keys of a range by create revision, names
// and revisions only (built once: each option is an allocation).
var lastTwoKeys = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
	clientv3.WithLimit(2), clientv3.WithKeysOnly()}

// firstKey reads the first key of a range by create revision, name and
// revision only.
var firstKey = append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())

// untilClosed returns a context that also ends when the driver closes.
func (d *Driver) untilClosed(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(d.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// check confirms, in one read transaction, that our key still exists with our
// create revision and lease, and finds the key just before it. No predecessor
// means we held the lock as of that revision; hold then refuses the grant if our
// lease's keepalive deadline has passed. So a waiter whose lease expired while it
// waited is never told it holds (etcd issue #11456, the Jepsen finding).
//
// The read is first served from the member's own state ("serializable"): a
// linearizable read needs a round of the consensus, which under write load waits
// for the write being made durable, and that would double the time of a handoff.
// What it proves is enough: our key existed with our lease, and no key before it,
// at a revision after our predecessor's delete (an older revision would still show
// the predecessor), and etcd cannot have expired the lease since (the deadline
// check). Only an operator's revoke or delete in the member's few milliseconds of
// lag could slip by, as one right after any read could, and the next refresh
// reports it. A read that finds our key gone, or still finds the predecessor we
// saw deleted (after), may come from a member that is behind, so it is repeated
// linearizably before it counts.
func (d *Driver) check(ctx context.Context, e *entry, after *mvccpb.KeyValue) (pred *mvccpb.KeyValue, known int64, sent time.Time, held bool, err error) {
	for _, linearizable := range []bool{false, true} {
		opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(e.rev-1))
		if !linearizable {
			opts = append(opts, clientv3.WithSerializable())
		}
		sent = time.Now()
		resp, err := d.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev),
				clientv3.Compare(clientv3.LeaseValue(e.key), "=", e.s.id)).
			Then(clientv3.OpGet(e.rng(), opts...)).
			Commit()
		if err != nil {
			return nil, 0, sent, false, err
		}
		if !resp.Succeeded {
			if linearizable {
				return nil, 0, sent, false, errKeyGone
			}
			continue
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, 0, sent, true, nil
		}
		if !linearizable && after != nil && string(kvs[0].Key) == string(after.Key) && kvs[0].CreateRevision == after.CreateRevision {
			continue
		}
		return kvs[0], resp.Header.Revision, sent, false, nil
	}
	panic("unreachable")
}

// waitDelete returns once pred is deleted, or may have been. The watch starts at
// the current revision, never an old one: etcd serves a watch that starts in the
// past ("unsynced") only every 100ms, which is what makes concurrency.Mutex hand
// over at about 80 locks a second. A delete that happened between reading pred
// and starting the watch is caught by reading pred again, unless the watch started
// at the very revision we read it at.
//
// etcd 3.4 can still register a watch from "now" as unsynced: it picks the start
// revision before it takes the lock that registers the watch, and a write in
// between leaves the watch behind by one revision, to be served up to 100ms late.
// So from the moment the watch is asked for until recheckUntil after etcd
// confirmed it (when etcd has surely caught the watch up), pred is also read
// again on a doubling schedule (recheckFirst, twice that, ... at most
// recheckMax apart); a handoff is then late by a few milliseconds at worst.
// The schedule starts before the confirmation because the etcd client sends a
// stream's watch requests one at a time, each after the previous one was
// confirmed: with many waiters on one client (readers behind one writer, say)
// a watch can take tens of milliseconds to start under load, and its waiter
// would learn of a delete in that time only when it did.
func (d *Driver) waitDelete(ctx context.Context, e *entry, pred *mvccpb.KeyValue, known int64) error {
	wctx, cancel := context.WithCancel(ctx) // ctx requires a leader (see Acquire): a member without one cancels the watch
	defer cancel()
	wch := d.c.Watch(wctx, string(pred.Key), clientv3.WithCreatedNotify())
	var (
		step    = recheckFirst
		timer   = time.NewTimer(step)
		recheck = timer.C
		created time.Time // when etcd confirmed the watch; zero until then
	)
	defer timer.Stop()
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
					gone, err := d.gone(ctx, pred, true)
					if err != nil || gone {
						woke(ctx, err, driver.WakeTimer) // the fallback read, not the watch
						return err
					}
				}
				created = time.Now()
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					driver.Woke(ctx, driver.WakeNotified)
					return nil
				}
			}
		case <-recheck:
			last := !created.IsZero() && time.Since(created) >= recheckUntil
			gone, err := d.gone(ctx, pred, last)
			if err != nil || gone {
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
				return driver.ErrClosed // Close ends the sessions too
			}
			return errSessionEnded
		case <-d.held.Done():
			return driver.ErrClosed
		}
	}
}

// woke reports a wake-up of the waiting Acquire of ctx by src, unless the
// wait ended with err.
func woke(ctx context.Context, err error, src driver.WakeSource) {
	if err == nil {
		driver.Woke(ctx, src)
	}
}

// The schedule of the extra reads of a waiter's predecessor while its watch may
// not be started or may still be unsynced: about six reads in the first
// quarter second of a wait, then one every recheckMax while etcd has not
// confirmed the watch.
const (
	recheckFirst = 4 * time.Millisecond
	recheckUntil = 250 * time.Millisecond
	recheckMax   = 128 * time.Millisecond
)

// gone reports whether the key kv is no longer there as it was. The early
// re-reads of a waiter are served from the member's own state (serializable): they
// only decide whether to run check, and a stale answer merely delays that. The
// read after a watch started late, and the last re-read, are linearizable: after
// them no delete can be missed.
func (d *Driver) gone(ctx context.Context, kv *mvccpb.KeyValue, linearizable bool) (bool, error) {
	var opts []clientv3.OpOption
	if !linearizable {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := d.c.Get(ctx, string(kv.Key), opts...)
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision, nil
}

func (d *Driver) setRev(e *entry, rev int64) {
	d.held.Lock()
	e.rev = rev
	d.held.Unlock()
}

// hold records that e holds its lock since sent.
func (d *Driver) hold(e *entry, rev int64, sent time.Time) (driver.Grant, error) {
	d.held.Lock()
	e.rev = rev
	switch {
	case e.state == stateActive && !time.Now().Before(e.s.deadlineLocked()):
		// No keepalive was confirmed in time: the lease may be gone by now, so
		// the lock is not granted, and the lease is given up (as the session
		// goroutine is about to).
		lost := e.s.endLocked(errLeaseDeadline)
		d.held.Unlock()
		lost.run()
		d.revokeSoon(e.s.id)
		return driver.Grant{}, errSessionEnded
	case e.state == stateActive:
		e.state = stateHeld
		// The key lives on the lease, which etcd expires a lease TTL after
		// its last renewal, not after this put: the grant's validity must end
		// by the session's deadline, so it starts no later than that
		// deadline less the lock's TTL (and its drift).
		start := sent
		if s := e.s.deadlineLocked().Add(-(e.req.TTL - driver.Drift(e.req.TTL))); s.Before(start) {
			start = s
		}
		e.since = start.Sub(d.epoch)
		e.paidUntil = e.since + e.req.TTL
		e.value = "" // compared only while acquiring (see deleteIf)
		d.watchingLocked()
		d.coverLocked(e, rev)
		d.held.Unlock()
		return driver.Grant{Token: uint64(rev), Start: start}, nil
	case d.held.ClosedLocked():
		d.held.Unlock()
		return driver.Grant{}, driver.ErrClosed
	case e.s.dead != nil:
		d.held.Unlock()
		return driver.Grant{}, errSessionEnded
	}
	d.held.Unlock()
	// Released while its write was in flight (only a caller that releases a
	// request it is still acquiring can do that): the write must not stay.
	d.abandon(e)
	return driver.Grant{}, fmt.Errorf("%w: etcddriver: released while acquiring", driver.ErrNotHeld)
}

// failed handles an error in the middle of an acquisition and returns the error
// to report. Where the outcome is known (the lease ended, the driver closed, the
// call was cancelled), our key is deleted and the entry forgotten. A bare backend
// error leaves the key's fate unknown: the entry stays, so that a retry of the
// same request finds its place again and a Release removes the key.
func (d *Driver) failed(e *entry, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, errSessionEnded):
		d.held.Lock()
		if e.s.dead == nil {
			s := e.s
			lost := s.endLocked(errLeaseGone)
			d.held.Unlock()
			lost.run()
		} else {
			d.held.Unlock()
		}
		d.forget(e)
		return errSessionEnded
	case errors.Is(err, errKeyGone):
		d.forget(e)
		return err
	case errors.Is(err, driver.ErrClosed), isContextErr(err):
		d.abandon(e)
		return err
	}
	return err
}

// forget drops e, whose key is known to be absent.
func (d *Driver) forget(e *entry) {
	d.held.Lock()
	d.removeLocked(e)
	d.held.Unlock()
}

// abandon drops e and deletes its key, if it may exist, in the background: the
// caller may be returning because its context ended, and must not wait for a
// server that does not answer. If the delete fails the session goroutine
// retries it, so the key cannot block others for the life of our lease. (A later
// request that reuses the key's name finds the old key, not its own, and
// deletes it first; deleteKey never removes a newer key of that name.)
func (d *Driver) abandon(e *entry) {
	d.held.Lock()
	defer d.held.Unlock()
	d.removeLocked(e)
	if d.held.ClosedLocked() {
		return // Close revokes the lease, which takes the key with it
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(d.ctx, cleanupTimeout)
		err := d.deleteKey(ctx, e)
		cancel()
		if err != nil {
			d.held.Lock()
			if e.s.dead == nil && !d.held.ClosedLocked() {
				e.s.orphans = append(e.s.orphans, e)
			}
			d.held.Unlock()
		}
	}()
}

// cleanupTimeout bounds deleting the key of an abandoned acquisition.
const cleanupTimeout = 5 * time.Second

// deleteKey deletes e's key if it is still the one e wrote: the same create
// revision (a key's incarnation), or, while that is unknown, the value e
// wrote (it ends with e's owner, unique per request; only a held key is ever
// relabelled, and a held entry's revision is known). A delayed or repeated delete can therefore never
// remove a newer key of the same name (etcd issue #22082).
func (d *Driver) deleteKey(ctx context.Context, e *entry) error {
	d.held.Lock()
	rev := e.rev
	d.held.Unlock()
	_, err := d.deleteIf(ctx, e, rev)
	return err
}

// deleteIf deletes e's key if it has the create revision rev, or, while rev
// is unknown (zero: e never held, so its value is still kept), e's value.
func (d *Driver) deleteIf(ctx context.Context, e *entry, rev int64) (bool, error) {
	var same clientv3.Cmp
	if rev > 0 {
		same = clientv3.Compare(clientv3.CreateRevision(e.key), "=", rev)
	} else {
		same = clientv3.Compare(clientv3.Value(e.key), "=", e.value)
	}
	resp, err := d.c.Txn(ctx).If(same).Then(clientv3.OpDelete(e.key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// deleteStale deletes a key of ours that no request owns, found where e wants to
// write.
func (d *Driver) deleteStale(ctx context.Context, e *entry, kv *mvccpb.KeyValue) error {
	_, err := d.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(e.key)).
		Commit()
	return err
}
