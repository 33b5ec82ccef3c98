package memdriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/memdriver"
)

// rig is one store with a client per call, and the helpers the queueing tests
// share.
type rig struct {
	t    *testing.T
	ctx  context.Context
	name string
	d    *memdriver.Driver // to look at the queue
}

func newRig(t *testing.T) *rig {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	d := memdriver.New(t.Name())
	t.Cleanup(func() { d.Close() })
	return &rig{t: t, ctx: ctx, name: t.Name(), d: d}
}

func (r *rig) client(opts ...lock.Option) *lock.Locker {
	lk := lock.New(memdriver.New(r.name), opts...)
	r.t.Cleanup(func() { lk.Close() })
	return lk
}

// acquire starts an Acquire and waits until it is queued behind `queued`
// earlier waiters (or holds the key); the channel yields its lock.
func (r *rig) acquire(queued int, opts ...lock.Option) <-chan *lock.Lock {
	r.t.Helper()
	lk := r.client()
	ch := make(chan *lock.Lock, 1)
	go func() {
		l, err := lk.Acquire(r.ctx, "k", opts...)
		if err != nil {
			r.t.Errorf("Acquire: %v", err)
		}
		ch <- l
	}()
	r.waitQueued(queued + 1)
	return ch
}

func (r *rig) waitQueued(n int) {
	r.t.Helper()
	for r.d.Waiting("k") != n {
		if r.ctx.Err() != nil {
			r.t.Fatalf("queue of %d waiters, want %d", r.d.Waiting("k"), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *rig) hold(opts ...lock.Option) *lock.Lock {
	r.t.Helper()
	l, err := r.client().TryAcquire(r.ctx, "k", opts...)
	if err != nil {
		r.t.Fatalf("TryAcquire: %v", err)
	}
	return l
}

func (r *rig) got(ch <-chan *lock.Lock, what string) *lock.Lock {
	r.t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			r.t.Fatalf("%s: Acquire failed", what)
		}
		return l
	case <-r.ctx.Done():
		r.t.Fatalf("%s never took the key", what)
		return nil
	}
}

func (r *rig) release(l *lock.Lock) {
	r.t.Helper()
	if err := l.Release(r.ctx); err != nil {
		r.t.Fatalf("Release: %v", err)
	}
}

var shared = lock.WithShared(true)

func TestReaderArrivingAfterAWaitingWriterWaitsBehindIt(t *testing.T) {
	r := newRig(t)
	r1 := r.hold(shared)
	w := r.acquire(0)
	if _, err := r.client().TryAcquire(r.ctx, "k", shared); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire(shared) behind a waiting writer = %v, want ErrLocked", err)
	}
	r2 := r.acquire(1, shared)
	r.release(r1)
	wl := r.got(w, "the writer")
	r.waitQueued(1) // the later reader still waits, behind the writer's hold
	if wl.Token() <= r1.Token() {
		t.Errorf("writer's token %d does not fence the reader's %d", wl.Token(), r1.Token())
	}
	r.release(wl)
	r.release(r.got(r2, "the later reader"))
}

func TestReadersThatArrivedBeforeAWaitingWriterKeepTheirTurn(t *testing.T) {
	r := newRig(t)
	x := r.hold()
	early := r.acquire(0, shared)
	w := r.acquire(1)
	late := r.acquire(2, shared)
	r.release(x)
	el := r.got(early, "the reader ahead of the writer")
	r.waitQueued(2) // the writer and the later reader wait on
	select {
	case <-late:
		t.Fatal("the reader behind the writer went before it")
	default:
	}
	r.release(el)
	r.release(r.got(w, "the writer"))
	r.release(r.got(late, "the reader behind the writer"))
}

func TestReadersAheadOfAWriterRunTogether(t *testing.T) {
	r := newRig(t)
	x := r.hold()
	a := r.acquire(0, shared)
	b := r.acquire(1, shared)
	w := r.acquire(2)
	r.release(x)
	al, bl := r.got(a, "the first reader"), r.got(b, "the second reader")
	r.release(al)
	r.release(bl)
	r.release(r.got(w, "the writer"))
}

func TestPermitWaitersAreGrantedInArrivalOrder(t *testing.T) {
	r := newRig(t)
	two := lock.WithPermits(2)
	p1, p2 := r.hold(two), r.hold(two)
	first := r.acquire(0, two)
	second := r.acquire(1, two)
	if _, err := r.client().TryAcquire(r.ctx, "k", two); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrLocked", err)
	}
	r.release(p1)
	f := r.got(first, "the first waiter")
	r.waitQueued(1)
	r.release(p2)
	r.release(r.got(second, "the second waiter"))
	r.release(f)
}

// A key is one shape at a time: other users' other numbers of permits, or the
// key as a lock, are ErrInvalidArgument while anyone holds it; once it is free
// it may take another shape.
func TestMismatchedShapesOfOneKeyAreInvalidArguments(t *testing.T) {
	r := newRig(t)
	l := r.hold(lock.WithPermits(3))
	for name, opts := range map[string][]lock.Option{
		"two permits":  {lock.WithPermits(2)},
		"exclusive":    nil,
		"one permit":   {lock.WithPermits(1)},
		"shared":       {shared},
		"four permits": {lock.WithPermits(4)},
	} {
		lk := r.client()
		if _, err := lk.TryAcquire(r.ctx, "k", opts...); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("TryAcquire(%s) on a semaphore of 3 = %v, want ErrInvalidArgument", name, err)
		}
		if _, err := lk.Acquire(r.ctx, "k", opts...); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Acquire(%s) on a semaphore of 3 = %v, want ErrInvalidArgument", name, err)
		}
	}
	r.release(l)
	x := r.hold(shared)
	if _, err := r.client().TryAcquire(r.ctx, "k", lock.WithPermits(3)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("TryAcquire(3 permits) on a read-write lock = %v, want ErrInvalidArgument", err)
	}
	r.release(x)
	r.release(r.hold(lock.WithPermits(2)))
}
