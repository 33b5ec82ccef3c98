package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// Leader is who leads an election at one moment, as Leader and Observe report
// it.
type Leader struct {
	// Name is the election's name.
	Name string
	// Elected: someone leads. When false no one does, and the fields below
	// are zero.
	Elected bool
	// Value is what the leader published (Campaign, Proclaim).
	Value string
	// Owner is the leader's owner name (WithOwnerName, default "host:pid").
	Owner string
	// Token is the leader's term: its lock's fencing token, larger for every
	// new leader. Zero on drivers without fencing.
	Token uint64
	// Since is when the leader was elected: by the backend's clock where it
	// records the grant, else by the leader's.
	Since time.Time

	holder string // the leader's lock owner, which tells two terms apart without tokens
}

// Leadership is this caller's lead of an election, won by Campaign. An
// election is an exclusive lock on its name: whoever holds the lock leads,
// so Inspect and ForceRelease work on it too. It is refreshed like any lock
// and lost by the same rules: Lost closes when it may be over, and work done
// as the leader must stop then. Pass Token to the resources a leader changes,
// so that a deposed leader's late writes are rejected.
type Leadership struct {
	lk   *Locker
	l    *Lock
	name string

	owner string    // the owner name in the label
	since time.Time // the label's since

	mu    sync.Mutex
	value string
}

// Campaign blocks until this caller leads the election name, or ctx ends,
// and publishes value (an address, a host name) with the leadership. Options
// are those of Acquire (WithTTL, WithOwnerName, ...); a leader holds its name
// alone, so WithShared, WithPermits above 1 and WithAutoRefresh(false) are
// ErrInvalidArgument. value is at most 1024 bytes of printable UTF-8.
func (lk *Locker) Campaign(ctx context.Context, name, value string, opts ...AcquireOption) (*Leadership, error) {
	if err := checkText("value", value, maxValue); err != nil {
		return nil, &Error{Op: "campaign", Key: name, Err: err}
	}
	o := lk.defaults.apply(opts)
	if o.shared || o.permits > 1 || !o.autoRefresh {
		return nil, &Error{Op: "campaign", Key: name, Err: fmt.Errorf("%w: a leader holds its name alone and refreshed (no WithShared, WithPermits above 1 or WithAutoRefresh(false))", ErrInvalidArgument)}
	}
	opts = append(opts[:len(opts):len(opts)], func(o *options) { o.value = value })
	l, err := lk.acquire(ctx, "campaign", name, false, opts)
	if err != nil {
		return nil, err
	}
	ld := &Leadership{lk: lk, l: l, name: name, value: value, owner: o.owner(), since: time.UnixMilli(decodeLabel(l.req.Label).Since)}
	// The label was written when the campaign began; where the driver can,
	// the leadership's start is published as the moment it was won. If that
	// fails for a passing reason, the label keeps the campaign's start.
	if rl, ok := lk.d.(driver.Labeler); ok {
		now := time.Now()
		err := classify(rl.Relabel(ctx, &l.req, encodeLabel(ld.owner, now, value)))
		switch {
		case err == nil:
			ld.since = now
		case isNotHeld(err):
			return nil, wrapErr("campaign", name, l.notHeld(err))
		}
	}
	return ld, nil
}

// Name returns the election's name.
func (ld *Leadership) Name() string { return ld.name }

// Lost returns a channel that closes when this caller may no longer lead.
func (ld *Leadership) Lost() <-chan struct{} { return ld.l.Lost() }

// Err is nil while this caller leads, and tells why it no longer does after
// Lost closed or Resign (see Lock.Err).
func (ld *Leadership) Err() error { return ld.l.Err() }

// Token returns the term: the leadership's fencing token, larger than every
// earlier leader's. Like Lock.Token it panics on a driver without fencing.
func (ld *Leadership) Token() uint64 { return ld.l.Token() }

// Value returns the value this leader publishes.
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Proclaim changes the published value while leading. It returns an error
// matching ErrNotHeld (and ErrLost) once the leadership is over, and
// ErrUnsupported on a driver that cannot change a held lock's label.
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	rl, ok := ld.lk.d.(driver.Labeler)
	if err := ld.lk.operatorCall(ctx, "proclaim", ld.name, ok, "changing a leader's value"); err != nil {
		return err
	}
	if err := checkText("value", value, maxValue); err != nil {
		return &Error{Op: "proclaim", Key: ld.name, Err: err}
	}
	ld.l.opMu.Lock()
	defer ld.l.opMu.Unlock()
	if err := ld.l.usable(); err != nil {
		return wrapErr("proclaim", ld.name, err)
	}
	err := classify(rl.Relabel(ctx, &ld.l.req, encodeLabel(ld.owner, ld.since, value)))
	switch {
	case err == nil:
		ld.mu.Lock()
		ld.value = value
		ld.mu.Unlock()
		return nil
	case isNotHeld(err):
		return wrapErr("proclaim", ld.name, ld.l.notHeld(err))
	default:
		return wrapErr("proclaim", ld.name, err)
	}
}

// Resign gives the leadership up, so that the next campaigner leads at once.
// Like Lock.Release it returns an error matching ErrNotHeld and ErrLost if the
// leadership was already lost; resigning twice is safe.
func (ld *Leadership) Resign(ctx context.Context) error {
	if err := ld.l.Release(ctx); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Op == "release" {
			return &Error{Op: "resign", Key: ld.name, Err: e.Err}
		}
		return err
	}
	return nil
}

// Leader returns the current leader of the election name, or an error matching
// ErrNoLeader when no one leads it. A driver that cannot describe a key's
// holders returns ErrUnsupported.
func (lk *Locker) Leader(ctx context.Context, name string) (Leader, error) {
	in, err := lk.inspect(ctx, "leader", name)
	if err != nil {
		return Leader{}, err
	}
	l, ok := leaderOf(name, in)
	if !ok {
		return Leader{}, &Error{Op: "leader", Key: name, Err: ErrNoLeader}
	}
	return l, nil
}

// leaderOf is the leader an inspection shows: the key's one exclusive holder.
func leaderOf(name string, in driver.Info) (Leader, bool) {
	if len(in.Holders) != 1 || in.Holders[0].Shared || in.Permits > 1 {
		return Leader{Name: name}, false
	}
	h := in.Holders[0]
	lb := decodeLabel(h.Label)
	since := h.Since
	if since.IsZero() && lb.Since != 0 {
		since = time.UnixMilli(lb.Since)
	}
	return Leader{Name: name, Elected: true, Value: lb.Value, Owner: lb.Owner, Token: h.Token, Since: since, holder: h.Owner}, true
}
