package lock

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
)

// Info describes a key as the backend sees it at the moment of Inspect.
type Info struct {
	Key string
	// Held: the key has at least one live holder.
	Held bool
	// Shared: the holders hold it shared (read locks).
	Shared bool
	// Holders is how many hold the key: 1 for an exclusive lock, the count of
	// shared holders or of permit holders otherwise, 0 when free.
	Holders int
	// Permits is the key's number of permits while it is a semaphore, else 0.
	Permits int
	// Token is the latest token granted on the key: at least every current
	// holder's. Zero on drivers without fencing, or where the backend keeps no
	// record of it after the last holder left.
	Token uint64
	// Owner is the name (WithOwnerName, default "host:pid") of the latest
	// holder; Owners lists every holder's, in grant order.
	Owner  string
	Owners []string
	// Since is when the earliest current holder got the key: by the backend's
	// clock where it records the grant, else by the holder's clock when it
	// asked.
	Since time.Time
	// Expires is when the key's current validity ends unless refreshed (the
	// latest of its holders'), by the backend's clock; zero for session locks.
	Expires time.Time
	// Waiters is how many requests wait for the key, or -1 where the backend
	// cannot know.
	Waiters int
}

// Inspect reports who holds key. It changes nothing on the backend. A driver
// that cannot describe a key's holders returns ErrUnsupported.
func (lk *Locker) Inspect(ctx context.Context, key string) (Info, error) {
	in, err := lk.inspect(ctx, "inspect", key)
	if err != nil {
		return Info{}, err
	}
	return infoOf(key, in), nil
}

func (lk *Locker) inspect(ctx context.Context, op, key string) (driver.Info, error) {
	ins, ok := lk.d.(driver.Inspector)
	if err := lk.operatorCall(ctx, op, key, ok, "inspecting a key"); err != nil {
		return driver.Info{}, err
	}
	in, err := ins.Inspect(ctx, key)
	if err != nil {
		return driver.Info{}, wrapErr(op, key, classify(err))
	}
	return in, nil
}

// operatorCall checks what every inspection and operator call checks first.
func (lk *Locker) operatorCall(ctx context.Context, op, key string, supported bool, what string) error {
	if err := checkContext(ctx, op, key); err != nil {
		return err
	}
	switch {
	case lk.isClosed():
		return &Error{Op: op, Key: key, Err: ErrClosed}
	case !supported:
		return &Error{Op: op, Key: key, Err: fmt.Errorf("%w: %s (%s)", ErrUnsupported, what, lk.name)}
	}
	if op != "list" {
		if err := validateKey(key); err != nil {
			return &Error{Op: op, Key: key, Err: err}
		}
	}
	if err := ctx.Err(); err != nil {
		return &Error{Op: op, Key: key, Err: err}
	}
	return nil
}

func infoOf(key string, in driver.Info) Info {
	info := Info{Key: key, Holders: len(in.Holders), Held: len(in.Holders) > 0, Permits: in.Permits, Token: in.Token, Waiters: in.Waiters}
	for i, h := range in.Holders {
		lb := decodeLabel(h.Label)
		since := h.Since
		if since.IsZero() && lb.Since != 0 {
			since = time.UnixMilli(lb.Since)
		}
		if i == 0 || since.Before(info.Since) {
			info.Since = since
		}
		if h.Expires.After(info.Expires) {
			info.Expires = h.Expires
		}
		info.Shared = h.Shared
		info.Owner = lb.Owner
		info.Owners = append(info.Owners, lb.Owner)
		info.Token = max(info.Token, h.Token)
	}
	return info
}

// List returns the held keys that start with prefix ("" for all), sorted. A
// driver whose backend cannot enumerate its locks returns ErrUnsupported
// (its package doc says why).
func (lk *Locker) List(ctx context.Context, prefix string) ([]string, error) {
	ls, ok := lk.d.(driver.Lister)
	if err := lk.operatorCall(ctx, "list", prefix, ok, "listing held keys"); err != nil {
		return nil, err
	}
	if len(prefix) > MaxKeyLen || !utf8.ValidString(prefix) {
		return nil, &Error{Op: "list", Key: prefix, Err: fmt.Errorf("%w: a prefix must be valid UTF-8 no longer than a key", ErrInvalidKey)}
	}
	keys, err := ls.List(ctx, prefix)
	if err != nil {
		return nil, wrapErr("list", prefix, classify(err))
	}
	return keys, nil
}

// ForceRelease frees key whoever holds it: an operator's tool for a lock whose
// holder is stuck. The next holder's token is larger than every evicted
// holder's, so a resource that checks tokens rejects the evicted holders'
// late writes; their Lost channels close (at their next refresh, or at once
// where the backend tells them), and Err reports ErrForceReleased where the
// backend can tell an eviction from another loss. A key that no one holds is
// ErrNotHeld. A driver that cannot evict returns ErrUnsupported.
func (lk *Locker) ForceRelease(ctx context.Context, key string) error {
	ev, ok := lk.d.(driver.Evictor)
	if err := lk.operatorCall(ctx, "force-release", key, ok, "force release"); err != nil {
		return err
	}
	if _, err := ev.ForceRelease(ctx, key); err != nil {
		return wrapErr("force-release", key, classify(err))
	}
	return nil
}

// Err tells why the lock is no longer held: nil while it is held; after Lost
// has closed, an error matching ErrLost and its cause (ErrExpired,
// ErrTakenOver, ErrServerChanged, ErrSessionExpired, ErrForceReleased,
// ErrClosed, or what else the backend reported); after a successful Release, an
// error matching ErrNotHeld.
func (l *Lock) Err() error {
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch l.state {
	case stateAcquiring, stateHeld:
		return nil
	case stateReleased:
		return wrapErr("lock", l.req.Key, errReleased)
	case stateClosed:
		return wrapErr("lock", l.req.Key, fmt.Errorf("%w: %w", ErrLost, ErrClosed))
	default:
		return wrapErr("lock", l.req.Key, lostError(l.cause()))
	}
}
