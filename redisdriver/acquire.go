package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

// acquireResult is a decoded reply of acquire.lua.
type acquireResult struct {
	status int64
	token  uint64
	pttl   time.Duration // acqHeld: the lock's remaining TTL
	wait   time.Duration // acqBusy: when to look again; negative: no hint
	plain  bool          // acqTaken: the lock's value carries its label (no record in the fence key)
}

// How acquire.lua is run.
type acquireMode int

const (
	tryMode   acquireMode = iota // take a free lock, never queue (TryAcquire)
	probeMode                    // take a free lock if nobody queues, never queue (Acquire's first try)
	waitMode                     // take it if it is our turn, or join (or stay in) the queue
)

// runAcquire runs acquire.lua once; waitMode needs the lease.
func (d *Driver) runAcquire(ctx context.Context, k keys, req *driver.Request, mode acquireMode, lease time.Duration) (acquireResult, error) {
	if shape(req) >= 0 {
		return d.runShaped(ctx, k, req, mode, lease)
	}
	script := acquireScript
	plain := !d.fencing && plainOwner(req.Owner)
	if plain {
		if mode == tryMode {
			if r, ok, err := d.tryPlain(ctx, k, req); ok || err != nil {
				return r, err
			}
		}
		script = plainScript
	}
	call := newHotCall(script, k)
	call.owner, call.ttl, call.label = req.Owner, millis(req.TTL), req.Label
	call.add(&call.owner)
	call.add(&call.ttl)
	call.add(&call.label)
	switch mode {
	case probeMode:
		call.add("")
	case waitMode:
		call.inbox, call.lease = d.inbox, millis(lease)
		call.add(&call.inbox)
		call.add(&call.lease)
	}
	v, err := call.run(ctx, d.client, script).Result()
	if err != nil {
		return acquireResult{}, err
	}
	r, err := decodeAcquire(v, k)
	r.token = d.token(r.token)
	// plain.lua's fast path answers with a bare 0: the lock's value carries
	// the label.
	_, r.plain = v.(int64)
	r.plain = r.plain && plain
	return r, err
}

// plainOwner reports whether owner can head a lock's value in the layout
// without fencing (owner, NUL, label): it is not empty and holds no NUL, so
// it is the value's part before the first NUL. Package lock's owners always
// can; another owner takes acquire.lua's layout (the owner alone and the
// record in the fence key), which every script reads too.
func plainOwner(owner string) bool { return owner != "" && strings.IndexByte(owner, 0) < 0 }

// tryPlain is TryAcquire's path without fencing: one SET NX PX of the lock's
// value (owner, NUL, label), the standard pattern's single command. Watchers
// hear of the grant from the server's client-side tracking of the key (see
// Watch), so the acquirer does not look for them; in a Cluster, where
// watches do not track (see trackingClient), the watchers' deadline is read
// in the same round trip (HGET), and the watchers of a watched key are told
// of the grant (one more round trip, only then; a watch that began after the
// HGET began after the grant, which it need not report). ok is false when
// the key was taken: plain.lua then tells a lock already ours (a retry after
// a lost reply) from another's, from a semaphore and from a value that is
// not a string. Like acquire.lua's TryAcquire, it takes any free lock (see
// Waiting in the package documentation).
func (d *Driver) tryPlain(ctx context.Context, k keys, req *driver.Request) (r acquireResult, ok bool, err error) {
	var set *redis.Cmd
	var watched *redis.StringCmd
	value := req.Owner + "\x00" + req.Label
	if d.cluster == nil {
		set = d.client.Do(ctx, "set", k.Lock, value, "px", millis(req.TTL), "nx")
	} else {
		_, _ = d.client.Pipelined(ctx, func(p redis.Pipeliner) error { // errors are read per command
			set = p.Do(ctx, "set", k.Lock, value, "px", millis(req.TTL), "nx")
			watched = p.HGet(ctx, k.Labels, "\x00watch")
			return nil
		})
	}
	switch err = set.Err(); {
	case err == redis.Nil:
		return acquireResult{}, false, nil
	case err != nil:
		return acquireResult{}, false, err
	}
	if watched != nil && watched.Err() == nil {
		// A signal without a change is allowed: the deadline is not read.
		// A failed PUBLISH loses no change a watcher can miss unknowingly:
		// the watcher's own connection to this server failed too, and its
		// new subscription signals.
		_ = d.client.Publish(ctx, k.Watch, "").Err()
	}
	return acquireResult{status: acqTaken, plain: true}, true, nil
}

// token is what the driver reports of a token the scripts minted: nothing
// without fencing (see Without fencing in the package documentation).
func (d *Driver) token(tok uint64) uint64 {
	if !d.fencing {
		return 0
	}
	return tok
}

// runShaped runs shaped.lua once, for a shared hold or a permit (see shape).
// TryAcquire and Acquire's first try are the same there: neither queues, and
// both respect the queue (so a writer that waits is never passed).
func (d *Driver) runShaped(ctx context.Context, k keys, req *driver.Request, mode acquireMode, lease time.Duration) (acquireResult, error) {
	n := shape(req)
	inbox := ""
	if mode == waitMode {
		inbox = d.inbox
	}
	v, err := shapedScript.Run(ctx, d.client, scriptKeys(k), req.Owner, millis(req.TTL), n, inbox, millis(lease), req.Label).Result()
	if err != nil {
		return acquireResult{}, err
	}
	r, err := decodeAcquire(v, k)
	r.token = d.token(r.token)
	return r, err
}

// decodeAcquire reads a reply of acquire.lua or shaped.lua, whose KEYS are
// scriptKeys(k).
func decodeAcquire(v any, k keys) (acquireResult, error) {
	if tok, ok := v.(int64); ok { // the uncontended path answers with the token alone
		return acquireResult{status: acqTaken, token: uint64(tok)}, nil
	}
	vals, _ := v.([]any)
	ints := make([]int64, len(vals))
	for i, x := range vals {
		n, ok := x.(int64)
		if !ok {
			return acquireResult{}, fmt.Errorf("redisdriver: acquire script answered %v", v)
		}
		ints[i] = n
	}
	if len(ints) == 0 {
		return acquireResult{}, fmt.Errorf("redisdriver: acquire script answered %v", v)
	}
	r := acquireResult{status: ints[0]}
	switch {
	case r.status == acqTaken && len(ints) >= 2:
		r.token = uint64(ints[1])
	case r.status == acqHeld && len(ints) >= 3:
		r.token, r.pttl = uint64(ints[1]), redisproto.FromMillis(ints[2])
	case r.status == acqBusy && len(ints) >= 2:
		r.wait = redisproto.FromMillis(ints[1])
	case r.status == acqWrongType:
		return r, fmt.Errorf("%w (key %q)", ErrWrongType, k.Lock)
	case r.status == acqForeign && len(ints) >= 2 && ints[1] >= 1 && ints[1] <= hotKeys:
		return r, fmt.Errorf("%w: key %q", ErrForeignData, scriptKeys(k)[ints[1]-1])
	case r.status == acqMismatch:
		return r, fmt.Errorf("%w: redisdriver: key %q is in use as another shape (exclusive or shared lock, or a semaphore of another number of permits)", driver.ErrInvalidArgument, k.Lock)
	default:
		return r, fmt.Errorf("redisdriver: acquire script answered %v", v)
	}
	return r, nil
}

// grant turns a taken or already-held result into a Grant. start is when the
// request was sent: a lock taken by it was set after start, and one found
// already ours expires pttl after the server read it, which is after start.
func grant(r acquireResult, req *driver.Request, start time.Time) driver.Grant {
	if r.status == acqHeld && r.pttl >= 0 {
		start = start.Add(r.pttl - req.TTL)
	}
	return driver.Grant{Token: r.token, Start: start}
}

// TryAcquire makes one attempt to take the lock. It returns driver.ErrLocked
// when another owner holds it, and the same grant again when req.Owner already
// holds it. It never joins the queue.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := d.usable(ctx); err != nil {
		return driver.Grant{}, err
	}
	ctx, done := d.attempt(ctx)
	g, err := d.tryAcquire(ctx, req)
	return g, done(err)
}

func (d *Driver) tryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	k := d.keys(req.Key)
	start := time.Now()
	r, err := d.runAcquire(ctx, k, req, tryMode, 0)
	if err != nil {
		return driver.Grant{}, classify(err)
	}
	if r.status == acqBusy {
		return driver.Grant{}, driver.ErrLocked
	}
	if err := d.recordGrant(ctx, k, req, r.plain); err != nil {
		return driver.Grant{}, err
	}
	return grant(r, req, start), nil
}

// recordGrant remembers a lock just granted, with the server that granted it.
// When that server cannot be told (it went away right after the grant), the
// grant is reported as a transient failure: package lock's retry with the
// same owner finds the lock ours, or its cleanup releases it.
// plain says that the lock's value carries its label (see tryPlain), so
// refresh has no record to keep alive in the fence key.
func (d *Driver) recordGrant(ctx context.Context, k keys, req *driver.Request, plain bool) error {
	n, err := d.grantedBy(ctx, k.Lock)
	if err != nil {
		return classify(fmt.Errorf("redisdriver: identifying the server that granted the lock: %w", err))
	}
	d.record(req, n, plain)
	return nil
}

// A waiter is one Acquire call waiting in a lock's queue. The inbox reader
// sends it the token of a lock handed to it.
type waiter struct {
	granted chan uint64 // buffered: the reader never blocks
}

// pollWithoutInbox is how often a waiter looks again while the driver has no
// pub/sub subscription (the server refused it, or it is reconnecting). It keeps
// its place in the queue meanwhile; only the wake-up is slower.
const pollWithoutInbox = 50 * time.Millisecond

// Acquire blocks until req.Owner holds req.Key, ctx is done or the driver is
// closed. It joins the key's queue, so waiters are served in arrival order, and
// is woken by the release that hands it the lock (see Waiting in the package
// documentation). It succeeds at once if the key already holds req.Owner. When
// its context ends or the driver is closed it leaves the queue (and releases a
// lock handed to it meanwhile). A backend error (matching driver.ErrUnavailable
// when transient) keeps its place for a retry with the same owner; Release
// gives the place up.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := d.usable(ctx); err != nil {
		return driver.Grant{}, err
	}
	// ended is the error of a round trip that failed because the call's context
	// ended or the driver was closed meanwhile, or err.
	ended := func(err error) error {
		if d.ctx.Err() != nil {
			return driver.ErrClosed
		}
		if perr := ctx.Err(); perr != nil {
			return perr
		}
		return classify(err)
	}
	k := d.keys(req.Key)
	// An exclusive request's first try respects the queue without joining
	// it, so that an uncontended Acquire costs what TryAcquire does (see
	// acquire.lua's fast path). A shared or permit request joins the queue
	// in its first try instead, when not granted at once: shaped.lua costs
	// the same either way, and a waiter saves a round trip.
	if shape(req) < 0 {
		start := time.Now()
		r, err := d.runAcquire(ctx, k, req, probeMode, 0)
		if err != nil {
			return driver.Grant{}, ended(err)
		}
		if r.status != acqBusy {
			if err := d.recordGrant(ctx, k, req, r.plain); err != nil {
				return driver.Grant{}, ended(err)
			}
			return grant(r, req, start), nil
		}
	}

	w, err := d.startWait(req.Owner)
	if err != nil {
		return driver.Grant{}, err
	}
	defer d.endWait(req.Owner, w)
	// Close ends the wait (a round trip in flight ends at its read timeout at
	// worst: go-redis honours deadlines, not cancellation).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)()
	// stopped leaves the queue and returns the error of a call ended by its
	// context or by Close.
	stopped := func() error {
		d.abandon(req)
		return ended(wctx.Err())
	}
	subscribed := d.subscribe(wctx) == nil
	lease := max(req.TTL, minLease)
	var asked time.Time // when the last request that found the lock not ours was sent
	for {
		resub := d.resubscribed()
		start := time.Now()
		r, err := d.runAcquire(wctx, k, req, waitMode, lease)
		if err != nil {
			if wctx.Err() != nil {
				return driver.Grant{}, stopped()
			}
			// The place in the queue is kept for package lock's retry with
			// the same owner (its cleanup releases it if it gives up).
			return driver.Grant{}, classify(err)
		}
		if r.status != acqBusy {
			if err := d.recordGrant(wctx, k, req, r.plain); err != nil {
				if wctx.Err() != nil {
					return driver.Grant{}, stopped()
				}
				return driver.Grant{}, err
			}
			return grant(r, req, start), nil
		}
		asked = start
		wait := lease / 3
		if r.wait >= 0 && r.wait+time.Millisecond < wait {
			wait = r.wait + time.Millisecond // just after the holder's TTL ends
		}
		if !subscribed && wait > pollWithoutInbox {
			wait = pollWithoutInbox
		}
		t := time.NewTimer(wait)
		select {
		case token := <-w.granted:
			t.Stop()
			driver.Woke(ctx, driver.WakeNotified)
			// A handoff writes the owner alone, with its record in the
			// fence key (see grantLock in common.lua).
			if err := d.recordGrant(wctx, k, req, false); err != nil {
				if wctx.Err() != nil {
					return driver.Grant{}, stopped()
				}
				return driver.Grant{}, err
			}
			// The lock was handed to us after the server answered the request
			// sent at asked, and with our TTL.
			return driver.Grant{Token: d.token(token), Start: asked}, nil
		case <-t.C:
			driver.Woke(ctx, driver.WakeTimer)
		case <-resub:
			// The inbox reconnected: a handoff may have been missed. The
			// re-check is the fallback's, not a handoff.
			t.Stop()
			subscribed = true
			driver.Woke(ctx, driver.WakeTimer)
		case <-wctx.Done(): // the caller's context, or Close
			t.Stop()
			return driver.Grant{}, stopped()
		}
	}
}

// startWait registers a waiting call for the inbox reader and for Close.
func (d *Driver) startWait(owner string) (*waiter, error) {
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.OpenLocked(); err != nil {
		return nil, err
	}
	w := &waiter{granted: make(chan uint64, 1)}
	d.waiters[owner] = w
	d.calls.Add(1)
	return w, nil
}

func (d *Driver) endWait(owner string, w *waiter) {
	d.held.Lock()
	if d.waiters[owner] == w {
		delete(d.waiters, owner)
	}
	d.held.Unlock()
	d.calls.Done()
}

// abandon takes a waiter out of its queue, and releases the lock if it was
// handed to the waiter meanwhile, so a cancelled Acquire leaves nothing behind.
func (d *Driver) abandon(req *driver.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	_, _ = d.release(ctx, req)
}

// deliver passes a handoff message, "<owner> <token>", to its waiter. A message
// for an owner no longer waiting is dropped: that owner either released the
// lock already (abandon) or finds it on its next attempt.
func (d *Driver) deliver(payload string) {
	owner, tok, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return
	}
	d.held.Lock()
	w := d.waiters[owner]
	d.held.Unlock()
	if w == nil {
		return
	}
	select {
	case w.granted <- token:
	default:
	}
}

func isNotHeld(err error) bool { return errors.Is(err, driver.ErrNotHeld) }
