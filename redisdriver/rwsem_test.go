package redisdriver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
)

// acquireAsync runs Acquire in a goroutine; the lock (or nil) arrives on the
// channel.
func acquireAsync(t *testing.T, ctx context.Context, lk *lock.Locker, key string, opts ...lock.Option) <-chan *lock.Lock {
	t.Helper()
	ch := make(chan *lock.Lock, 1)
	go func() {
		l, err := lk.Acquire(ctx, key, opts...)
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		ch <- l
	}()
	return ch
}

// got waits for an Acquire started by acquireAsync.
func got(t *testing.T, ctx context.Context, ch <-chan *lock.Lock, what string) *lock.Lock {
	t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			t.Fatalf("%s: Acquire failed", what)
		}
		return l
	case <-ctx.Done():
		t.Fatalf("%s: not granted", what)
	}
	return nil
}

// notYet checks that an Acquire started by acquireAsync has not returned,
// and that the server still queues that many waiters: a grant out of turn
// would have left the queue in the release that preceded this check.
func (e *foreignEnv) notYet(t *testing.T, k keys, queued int64, ch <-chan *lock.Lock, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s was granted out of turn", what)
	default:
	}
	if n, err := e.admin.LLen(e.ctx, k.Queue).Result(); err != nil || n != queued {
		t.Fatalf("%s: %d waiters queued (%v), want %d", what, n, err, queued)
	}
}

// The exact queueing rule: readers queued before a writer are granted
// together when the exclusive holder releases; the writer waits for them; a
// reader that arrives after the waiting writer (by TryAcquire or Acquire)
// waits behind it, and is granted when the writer releases.
func TestReadersQueuedBeforeAWriterGoFirstAndLaterOnesWaitBehindIt(t *testing.T) {
	e := newForeignEnv(t)
	k := e.keys("rw")
	shared := lock.WithShared(true)

	w1, err := e.lk.TryAcquire(e.ctx, "rw")
	if err != nil {
		t.Fatal(err)
	}
	r1 := acquireAsync(t, e.ctx, e.lk, "rw", shared)
	waitQueueLen(t, e.ctx, e.admin, k.Queue, 1)
	r2 := acquireAsync(t, e.ctx, e.lk, "rw", shared)
	waitQueueLen(t, e.ctx, e.admin, k.Queue, 2)
	w2 := acquireAsync(t, e.ctx, e.lk, "rw")
	waitQueueLen(t, e.ctx, e.admin, k.Queue, 3)
	if _, err := e.lk.TryAcquire(e.ctx, "rw", shared); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("a reader's TryAcquire behind a waiting writer = %v, want ErrLocked", err)
	}
	r3 := acquireAsync(t, e.ctx, e.lk, "rw", shared)
	waitQueueLen(t, e.ctx, e.admin, k.Queue, 4)

	if err := w1.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	a, b := got(t, e.ctx, r1, "first queued reader"), got(t, e.ctx, r2, "second queued reader")
	e.notYet(t, k, 2, w2, "the writer, while the readers before it hold the key")
	e.notYet(t, k, 2, r3, "the reader behind the writer")
	if err := a.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.notYet(t, k, 2, w2, "the writer, while a reader before it holds the key")
	if err := b.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	w := got(t, e.ctx, w2, "the writer after the readers before it")
	e.notYet(t, k, 1, r3, "the reader behind the writer, while the writer holds the key")
	if v, err := e.admin.Get(e.ctx, k.Lock).Result(); err != nil || v == "\x00shared" {
		t.Fatalf("the lock key holds %q (%v) while the writer holds it", v, err)
	}
	if err := w.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := got(t, e.ctx, r3, "the reader behind the writer").Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.requireNoKeysLeft(t, k)
}

// Shared holds and permits make the lock key a marker that standard SET NX
// clients cannot take, and leave no key behind once released.
func TestSharedHoldsAndPermitsExcludeStandardSetNXClients(t *testing.T) {
	e := newForeignEnv(t)
	for _, opt := range []lock.Option{lock.WithShared(true), lock.WithPermits(3)} {
		k := e.keys("job")
		l, err := e.lk.TryAcquire(e.ctx, "job", opt)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := e.admin.SetNX(e.ctx, k.Lock, "standard-client", time.Second).Result(); err != nil || ok {
			t.Fatalf("standard SET NX while the driver holds a shared hold or a permit = %v, %v", ok, err)
		}
		if err := l.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
		e.requireNoKeysLeft(t, k)
	}
}

// A key in use as a semaphore of n permits refuses another n, a shared or an
// exclusive request with ErrInvalidArgument; a key held as a read-write lock
// refuses permits; and the refused request changes nothing.
func TestMismatchedShapesAreInvalidArgument(t *testing.T) {
	e := newForeignEnv(t)
	cases := []struct {
		name       string
		held       []lock.Option
		mismatched []lock.Option
	}{
		{"permits 2 on a semaphore of 3", []lock.Option{lock.WithPermits(3)}, []lock.Option{lock.WithPermits(2)}},
		{"shared on a semaphore", []lock.Option{lock.WithPermits(3)}, []lock.Option{lock.WithShared(true)}},
		{"exclusive on a semaphore", []lock.Option{lock.WithPermits(3)}, nil},
		{"permits on a shared hold", []lock.Option{lock.WithShared(true)}, []lock.Option{lock.WithPermits(3)}},
		{"permits on an exclusive lock", nil, []lock.Option{lock.WithPermits(3)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "mismatch-" + randomHex(4)
			l, err := e.lk.TryAcquire(e.ctx, key, c.held...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.lk.TryAcquire(e.ctx, key, c.mismatched...); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("TryAcquire = %v, want ErrInvalidArgument", err)
			}
			if _, err := e.lk.Acquire(e.ctx, key, c.mismatched...); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("Acquire = %v, want ErrInvalidArgument", err)
			}
			if n, err := e.admin.Exists(e.ctx, e.keys(key).Queue).Result(); err != nil || n != 0 {
				t.Errorf("the refused request queued: %d, %v", n, err)
			}
			if err := l.Refresh(e.ctx); err != nil {
				t.Errorf("the holder's Refresh after the refused request: %v", err)
			}
			if err := l.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			e.requireNoKeysLeft(t, e.keys(key))
		})
	}
}

// A permit waiter is handed the permit a holder gives back, with a token
// above every earlier one, and a semaphore's keys expire with its last hold.
func TestPermitGivenBackIsHandedToTheFirstWaiter(t *testing.T) {
	e := newForeignEnv(t)
	k := e.keys("sem")
	n := lock.WithPermits(2)
	a, err := e.lk.TryAcquire(e.ctx, "sem", n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.lk.TryAcquire(e.ctx, "sem", n)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("tokens %d then %d, want increasing", a.Token(), b.Token())
	}
	if ttl, err := e.admin.PTTL(e.ctx, k.Holders).Result(); err != nil || ttl <= 0 {
		t.Errorf("the holders key's TTL = %v, %v; want it to expire with the holds", ttl, err)
	}
	c := acquireAsync(t, e.ctx, e.lk, "sem", n)
	waitQueueLen(t, e.ctx, e.admin, k.Queue, 1)
	if err := a.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	l := got(t, e.ctx, c, "the permit waiter")
	if l.Token() <= b.Token() {
		t.Errorf("the waiter's token %d is not above the earlier %d", l.Token(), b.Token())
	}
	for _, x := range []*lock.Lock{b, l} {
		if err := x.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.requireNoKeysLeft(t, k)
}

// requireNoKeysLeft checks that nothing of the key's lock stays on the server
// (the fence record excepted, which outlives its grants on purpose).
func (e *foreignEnv) requireNoKeysLeft(t *testing.T, k keys) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if n, err := e.admin.Exists(ctx, k.Lock, k.Queue, k.Waiters, k.Holders, k.Labels).Result(); err != nil || n != 0 {
		t.Errorf("%d of the lock's keys left after the last release (%v)", n, err)
	}
}

// The holders set always expires with the marker, also when a grant makes it
// anew under a marker that outlived it (its members were deleted by hand: an
// emptied set is deleted), so a key whose holders vanish leaves nothing.
func TestHoldersSetExpiresWithTheMarker(t *testing.T) {
	e := newForeignEnv(t)
	k := e.keys("r")
	shared := lock.WithShared(true)
	a, err := e.lk.TryAcquire(e.ctx, "r", shared)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Del(e.ctx, k.Holders).Err(); err != nil {
		t.Fatal(err)
	}
	// A shorter TTL than the marker's left, so the marker keeps its expiry.
	b, err := e.lk.TryAcquire(e.ctx, "r", shared, lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	marker, err := e.admin.PTTL(e.ctx, k.Lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	holders, err := e.admin.PTTL(e.ctx, k.Holders).Result()
	if err != nil || holders <= 0 || holders > marker {
		t.Errorf("holders set TTL %v (%v), want positive and at most the marker's %v", holders, err, marker)
	}
	if err := a.Release(e.ctx); !errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release of the hold deleted by hand = %v, want ErrNotHeld", err)
	}
	if err := b.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.requireNoKeysLeft(t, k)
}
