package redisdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

// acquireResult is a decoded reply of acquire.lua.
type acquireResult struct {
	status int64
	token  uint64
	pttl   time.Duration // acqHeld: the lock's remaining TTL
	wait   time.Duration // acqBusy: when to look again; negative: no hint
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
	if n := shape(req); n >= 0 {
		return d.runShaped(ctx, k, req, n, mode, lease)
	}
	var args []any
	switch mode {
	case tryMode:
		args = []any{req.Owner, millis(req.TTL), req.Label}
	case probeMode:
		args = []any{req.Owner, millis(req.TTL), req.Label, ""}
	default:
		args = []any{req.Owner, millis(req.TTL), req.Label, d.inbox, millis(lease)}
	}
	script := acquireScript
	if !d.fencing {
		script = plainScript
	}
	all := k.all()
	v, err := script.Run(ctx, d.client, all, args...).Result()
	if err != nil {
		return acquireResult{}, err
	}
	r, err := decodeAcquire(v, k, all)
	r.token = d.token(r.token)
	return r, err
}

// token is what the driver reports of a token the scripts minted: nothing
// without fencing (see Without fencing in the package documentation).
func (d *Driver) token(tok uint64) uint64 {
	if !d.fencing {
		return 0
	}
	return tok
}

// runShaped runs shaped.lua once, for a shared hold (n = 0) or a permit of n.
// TryAcquire and Acquire's first try are the same there: neither queues, and
// both respect the queue (so a writer that waits is never passed).
func (d *Driver) runShaped(ctx context.Context, k keys, req *driver.Request, n int, mode acquireMode, lease time.Duration) (acquireResult, error) {
	inbox := ""
	if mode == waitMode {
		inbox = d.inbox
	}
	all := k.all()
	v, err := shapedScript.Run(ctx, d.client, all, req.Owner, millis(req.TTL), n, inbox, millis(lease), req.Label).Result()
	if err != nil {
		return acquireResult{}, err
	}
	r, err := decodeAcquire(v, k, all)
	r.token = d.token(r.token)
	return r, err
}

// decodeAcquire reads a reply of acquire.lua or shaped.lua; names are the
// script's KEYS.
func decodeAcquire(v any, k keys, names []string) (acquireResult, error) {
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
		return r, fmt.Errorf("%w (key %q)", ErrWrongType, k.lock)
	case r.status == acqForeign && len(ints) >= 2 && ints[1] >= 1 && ints[1] <= int64(len(names)):
		return r, fmt.Errorf("%w: key %q", ErrForeignData, names[ints[1]-1])
	case r.status == acqMismatch:
		return r, fmt.Errorf("%w: redisdriver: key %q is in use as another shape (exclusive or shared lock, or a semaphore of another number of permits)", driver.ErrInvalidArgument, k.lock)
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
	k := d.keys(req.Key)
	start := time.Now()
	r, err := d.runAcquire(ctx, k, req, tryMode, 0)
	if err != nil {
		return driver.Grant{}, classify(err)
	}
	if r.status == acqBusy {
		return driver.Grant{}, driver.ErrLocked
	}
	if err := d.recordGrant(ctx, k, req); err != nil {
		return driver.Grant{}, err
	}
	return grant(r, req, start), nil
}

// recordGrant remembers a lock just granted, with the server that granted it.
// When that server cannot be told (it went away right after the grant), the
// grant is reported as a transient failure: package lock's retry with the
// same owner finds the lock ours, or its cleanup releases it.
func (d *Driver) recordGrant(ctx context.Context, k keys, req *driver.Request) error {
	n, err := d.grantedBy(ctx, k.lock)
	if err != nil {
		return classify(fmt.Errorf("redisdriver: identifying the server that granted the lock: %w", err))
	}
	d.record(req, n)
	return nil
}
