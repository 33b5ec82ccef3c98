package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// MaxSetSize is the most keys AcquireAll, TryAcquireAll and DoAll take at
// once, after duplicates are removed.
const MaxSetSize = 1024

// LockSet is a set of locks taken together by AcquireAll or TryAcquireAll: all
// of them, or none. Each member is a Lock of its own, with its own refresh and
// fencing token (Lock(key).Token()); the set is lost when any member is. Its
// methods are safe for concurrent use.
type LockSet struct {
	keys  []string // canonical order: byte order of the key
	locks []*Lock  // in the order of keys
	lost  chan struct{}

	mu       sync.Mutex
	err      error // the first member's loss, naming its key
	released bool
	closed   bool          // lost is closed
	onLost   []func(error) // run once, with err, when lost closes
}

// AcquireAll takes the locks on every key, waiting as Acquire does for each,
// and returns them as one LockSet. Duplicate keys count once, and the keys
// are taken in one canonical order (byte order), so two callers whose sets
// overlap cannot deadlock, in whatever order they name the keys. It is all or
// nothing: when ctx ends, the Locker closes, a key fails permanently or a
// member is lost before the last is taken, every member already taken is
// released before AcquireAll returns, and the error (an *Error) names the key
// that stopped it. Options apply to every member. An empty set, or one of more
// than MaxSetSize keys, is ErrInvalidArgument, and an invalid key is
// ErrInvalidKey; either takes nothing.
//
// Where the driver can take several keys in one request (driver.SetAcquirer),
// free keys are taken in one round trip; otherwise, and when a key is held or
// waited for, they are taken one at a time, and a member taken early is held
// while later ones are waited for.
func (lk *Locker) AcquireAll(ctx context.Context, keys []string, opts ...AcquireOption) (*LockSet, error) {
	return lk.acquireAll(ctx, "acquire-all", keys, false, opts)
}

// TryAcquireAll is AcquireAll without waiting: if any key is held elsewhere it
// releases what it took and returns an error matching ErrLocked whose Key is
// that key.
func (lk *Locker) TryAcquireAll(ctx context.Context, keys []string, opts ...AcquireOption) (*LockSet, error) {
	return lk.acquireAll(ctx, "try-acquire-all", keys, true, opts)
}

// DoAll takes every key as AcquireAll does, runs fn while the set is held and
// releases it, as Do does for one key: fn's context is cancelled when any
// member is lost, and DoAll then returns an error matching ErrLost that names
// the member's key (joined with fn's error, if any). SetFromContext(ctx) gives
// fn the LockSet, for its members' tokens.
func (lk *Locker) DoAll(ctx context.Context, keys []string, fn func(context.Context) error, opts ...AcquireOption) (err error) {
	if fn == nil {
		return &Error{Op: "do-all", Err: fmt.Errorf("%w: nil function", ErrInvalidArgument)}
	}
	s, err := lk.acquireAll(ctx, "do-all", keys, false, opts)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.whenLost(cancel)
	defer func() {
		relErr := releaseAfterDo(ctx, s.Release)
		err = doOutcome(err, s.lossErr(), relErr)
	}()
	return fn(&doContext{Context: fctx, s: s})
}

// SetFromContext returns the LockSet whose DoAll made ctx (or a context
// derived from it); false for any other context. The set is valid until that
// DoAll returns, which releases it.
func SetFromContext(ctx context.Context) (*LockSet, bool) {
	if ctx == nil {
		return nil, false
	}
	s, ok := ctx.Value(doAllSetKey{}).(*LockSet)
	return s, ok
}

// doAllSetKey is the context key under which DoAll's context answers with its set.
type doAllSetKey struct{}

// setKeys checks keys and returns them de-duplicated in canonical order, or
// the error that changes nothing.
func setKeys(op string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, &Error{Op: op, Err: fmt.Errorf("%w: no keys", ErrInvalidArgument)}
	}
	for _, k := range keys {
		if err := validateKey(k); err != nil {
			return nil, &Error{Op: op, Key: k, Err: err}
		}
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
	if len(sorted) > MaxSetSize {
		return nil, &Error{Op: op, Err: fmt.Errorf("%w: %d keys, more than MaxSetSize (%d)", ErrInvalidArgument, len(sorted), MaxSetSize)}
	}
	return sorted, nil
}

func (lk *Locker) acquireAll(parent context.Context, op string, keys []string, try bool, opts []Option) (*LockSet, error) {
	if err := checkContext(parent, op, ""); err != nil {
		return nil, err
	}
	sorted, err := setKeys(op, keys)
	if err != nil {
		return nil, err
	}
	ctx, a := lk.tel.startAcquireSet(parent, op, len(sorted))
	s, err, done := lk.acquireAtOnce(ctx, op, sorted, opts, a)
	if !done {
		s, err = lk.acquireEach(ctx, op, sorted, try, opts)
	}
	a.end(ctx, "", err)
	return s, err
}

// acquireAtOnce takes the keys in one request where the driver can
// (driver.SetAcquirer). done is false when it did not take them and decided
// nothing (the driver cannot, a key is held or waited for, the grant came too
// late, the outcome was unknown): the keys are then taken one at a time.
func (lk *Locker) acquireAtOnce(parent context.Context, op string, keys []string, opts []Option, a *acquireSpan) (s *LockSet, err error, done bool) {
	sa, ok := lk.d.(driver.SetAcquirer)
	if !ok || len(keys) < 2 {
		return nil, nil, false
	}
	if err := parent.Err(); err != nil {
		return nil, &Error{Op: op, Key: keys[0], Err: err}, true
	}
	o := lk.defaults
	if len(opts) > 0 {
		o = o.apply(opts)
	}
	if err := lk.validate(&o); err != nil {
		return nil, &Error{Op: op, Key: keys[0], Err: err}, true
	}
	locks := make([]*Lock, len(keys))
	reqs := make([]*driver.Request, len(keys))
	start := time.Now()
	for i, k := range keys {
		locks[i] = lk.newLock(k, lk.owners.next(), &o, start)
		reqs[i] = &locks[i].req
	}
	ctx, c, err := lk.track(parent, lk.owners.next())
	if err != nil {
		return nil, &Error{Op: op, Key: keys[0], Err: err}, true
	}
	defer lk.untrack(c)
	grants, err := sa.TryAcquireSet(ctx, reqs)
	if a != nil {
		a.attempt(1, classify(err))
	}
	switch {
	case err == nil && len(grants) == len(reqs):
	case errors.Is(err, ErrLocked) || errors.Is(err, ErrUnsupported):
		return nil, nil, false // nothing was taken
	default:
		// The outcome is unknown (or the driver answered out of contract):
		// any key may be ours.
		for _, r := range reqs {
			lk.cleanup(r)
		}
		return nil, nil, false
	}
	for i, l := range locks {
		if !lk.fresh(l, grants[i], start) {
			for _, r := range reqs {
				lk.cleanup(r)
			}
			return nil, nil, false
		}
	}
	a.granted(start)
	s = &LockSet{keys: keys, locks: locks, lost: make(chan struct{})}
	for i, l := range locks {
		if err := lk.hold(l, grants[i], start, a); err != nil {
			for _, h := range locks[:i] {
				h.end(stateClosed, ErrClosed)
			}
			for _, r := range reqs {
				lk.cleanup(r)
			}
			return nil, &Error{Op: op, Key: keys[i], Err: err}, true
		}
	}
	for i, l := range locks {
		l.whenLost(func(cause error) { s.memberLost(keys[i], cause) })
	}
	if err := s.lossErr(); err != nil {
		s.giveBack(parent)
		return nil, asSetError(op, err), true
	}
	return s, nil, true
}

// acquireEach takes the keys (checked, in canonical order) one at a time, each
// as Acquire or TryAcquire does, under ctx (the set's span).
func (lk *Locker) acquireEach(ctx context.Context, op string, keys []string, try bool, opts []Option) (*LockSet, error) {
	memberOp := "acquire"
	if try {
		memberOp = "try-acquire"
	}
	s := &LockSet{keys: keys, locks: make([]*Lock, 0, len(keys)), lost: make(chan struct{})}
	for _, k := range keys {
		l, err := lk.acquire(ctx, memberOp, k, try, opts)
		if err == nil {
			s.locks = append(s.locks, l)
			l.whenLost(func(cause error) { s.memberLost(k, cause) })
			err = s.lossErr()
		}
		if err != nil {
			s.giveBack(ctx)
			return nil, asSetError(op, err)
		}
	}
	return s, nil
}

// asSetError is a member's error as the set's: the same, with the set's Op.
func asSetError(op string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		c := *e
		c.Op = op
		return &c
	}
	return &Error{Op: op, Err: err}
}

// giveBack releases what a failed acquireAll took, in reverse order, within
// cleanupTimeout of the caller's context's values (the context itself may be
// what ended).
func (s *LockSet) giveBack(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	s.mu.Lock()
	s.released = true
	s.mu.Unlock()
	for i := len(s.locks) - 1; i >= 0; i-- {
		_ = s.locks[i].Release(rctx) // a lost member has nothing to give back
	}
}

// memberLost records the first member loss, closes Lost and runs the hooks.
func (s *LockSet) memberLost(key string, cause error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if errors.Is(cause, ErrClosed) {
		cause = fmt.Errorf("%w: %w", ErrLost, ErrClosed)
	}
	s.err = wrapErr("lock", key, lostError(cause))
	s.closed = true
	close(s.lost)
	hooks, err := s.onLost, s.err
	s.onLost = nil
	s.mu.Unlock()
	for _, f := range hooks {
		f(err)
	}
}

// whenLost arranges for f to run once with the set's loss when a member is
// lost (at once if one already was).
func (s *LockSet) whenLost(f func(error)) {
	s.mu.Lock()
	if !s.closed {
		s.onLost = append(s.onLost, f)
		s.mu.Unlock()
		return
	}
	err := s.err
	s.mu.Unlock()
	f(err)
}

// lossErr is the first member's loss, or nil.
func (s *LockSet) lossErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Keys returns the set's keys, de-duplicated, in the order they were taken
// (byte order).
func (s *LockSet) Keys() []string { return slices.Clone(s.keys) }

// Lock returns the member lock of key, or nil if key is not a member.
func (s *LockSet) Lock(key string) *Lock {
	if i, ok := slices.BinarySearch(s.keys, key); ok {
		return s.locks[i]
	}
	return nil
}

// Lost returns a channel closed when any member is lost (or the Locker is
// closed under it). It is not closed by Release.
func (s *LockSet) Lost() <-chan struct{} { return s.lost }

// Err returns nil while every member is held. After a member was lost it
// returns that first loss: an *Error naming the member's key and matching
// ErrLost. After a Release without a loss it matches ErrNotHeld.
func (s *LockSet) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.err
	case s.released:
		return &Error{Op: "lock-set", Err: errReleased}
	}
	return nil
}

// Release releases every member, in the reverse of the order they were taken;
// every one is attempted, and their errors are joined (a lost member's
// release reports its loss). Releasing a set again does nothing and returns
// nil.
func (s *LockSet) Release(ctx context.Context) error {
	if err := checkContext(ctx, "release", ""); err != nil {
		return err
	}
	s.mu.Lock()
	again := s.released
	s.released = true
	s.mu.Unlock()
	if again {
		return nil
	}
	var errs []error
	for i := len(s.locks) - 1; i >= 0; i-- {
		if err := s.locks[i].Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
