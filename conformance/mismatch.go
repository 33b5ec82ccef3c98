package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/lock"
)

// mismatchWait is how long a mismatched Acquire is given to be wrongly
// granted: a driver that sees the mismatch refuses at once, one that queues
// the request keeps it waiting, and a grant would come within a round trip.
const mismatchWait = 300 * time.Millisecond

// strictMismatchWait bounds an Acquire that must be refused.
const strictMismatchWait = 10 * time.Second

// notGranted asserts that lk does not take key in the shape its options ask
// for while another shape holds it: TryAcquire returns ErrInvalidArgument or
// ErrLocked, and Acquire returns ErrInvalidArgument or is still waiting after
// mismatchWait. strict requires ErrInvalidArgument of both.
func (e *env) notGranted(lk *lock.Locker, key, what string, strict bool) {
	e.Helper()
	l, err := lk.TryAcquire(e.ctx, key)
	switch {
	case err == nil:
		_ = l.Release(e.ctx)
		e.Errorf("%s: TryAcquire was granted, want ErrInvalidArgument", what)
	case isErr(err, lock.ErrInvalidArgument):
	case !strict && isErr(err, lock.ErrLocked):
	default:
		e.Errorf("%s: TryAcquire = %v, want ErrInvalidArgument", what, err)
	}
	wait := mismatchWait
	if strict {
		// A refusal is due, however loaded the machine: only a wait that
		// never ends is wrong, and this bound is far beyond a round trip.
		wait = strictMismatchWait
	}
	ctx, cancel := context.WithTimeout(e.ctx, wait)
	defer cancel()
	l, err = lk.Acquire(ctx, key)
	switch {
	case err == nil:
		_ = l.Release(e.ctx)
		e.Errorf("%s: Acquire was granted, want ErrInvalidArgument", what)
	case isErr(err, lock.ErrInvalidArgument):
	case !strict && ctx.Err() != nil && e.ctx.Err() == nil:
	default:
		e.Errorf("%s: Acquire = %v, want ErrInvalidArgument", what, err)
	}
}

// A semaphore in use with n permits refuses a request for another number of
// permits (fewer or more) as ErrInvalidArgument, at once rather than after a
// wait, and the refusals take nothing: n-1 more holders of n still fit, and
// no more. Once no permit is held, the key may become a semaphore of
// another n.
func testPermitsOfAnotherNumberAreInvalidWhileTheSemaphoreIsInUse(e *env) {
	e.needPermits()
	if e.h.MixedPermits != "" {
		e.Skip("the driver documents that it does not always see another number of permits in use: " + e.h.MixedPermits)
	}
	holder := e.acquire(e.client(lock.WithPermits(semaphorePermits)), e.key)
	for _, n := range []int{semaphorePermits - 1, semaphorePermits + 1} {
		e.notGranted(e.client(lock.WithPermits(n)), e.key, fmt.Sprintf("a semaphore of %d beside one of %d", n, semaphorePermits), true)
	}
	same := e.client(lock.WithPermits(semaphorePermits))
	held := []*lock.Lock{holder}
	for i := 1; i < semaphorePermits; i++ {
		l, err := same.TryAcquire(e.ctx, e.key)
		if err != nil {
			e.Fatalf("permit %d of %d after the refused requests: %v (did a refused request take a permit?)", i+1, semaphorePermits, err)
		}
		held = append(held, l)
	}
	e.requireLocked(same, e.key, "every permit is held")
	for _, l := range held {
		e.release(l)
	}
	other := e.client(lock.WithPermits(semaphorePermits - 1))
	e.release(e.acquire(other, e.key))
}

// A key held in one shape is never granted in another: not as a semaphore
// while it is held as a lock (exclusive or shared), not as a lock while a
// semaphore's permit is held. Such a request is refused (ErrInvalidArgument,
// or ErrLocked and a wait where the driver queues it), and once the holder
// has gone the same request is granted: the refusal was the shape's.
func testAKeyInUseInOneShapeIsNotGrantedInAnother(e *env) {
	if e.h.MixedShapes != "" {
		e.Skip("the driver documents that it may grant a key in two shapes at once: " + e.h.MixedShapes)
	}
	type shapeOf struct {
		name string
		opts []lock.Option
	}
	mutex := shapeOf{"an exclusive lock", nil}
	shared := shapeOf{"a shared lock", []lock.Option{lock.WithShared(true)}}
	permits := shapeOf{"a semaphore of 2", []lock.Option{lock.WithPermits(2)}}
	var pairs [][2]shapeOf // held, asked
	if e.caps.Permits {
		pairs = append(pairs, [2]shapeOf{mutex, permits}, [2]shapeOf{permits, mutex})
		if e.caps.Shared {
			pairs = append(pairs, [2]shapeOf{shared, permits}, [2]shapeOf{permits, shared})
		}
	}
	if len(pairs) == 0 {
		e.Skip("driver declares no semaphores (Capabilities.Permits is false): a key has one shape besides read-write, which ExclusiveAndSharedExcludeEachOther checks")
	}
	for i, p := range pairs {
		key := fmt.Sprintf("%s/%d", e.key, i)
		held := e.acquire(e.client(p[0].opts...), key)
		asked := e.client(p[1].opts...)
		e.notGranted(asked, key, p[1].name+" asked while "+p[0].name+" is held", false)
		e.release(held)
		e.release(e.acquire(asked, key))
	}
}
