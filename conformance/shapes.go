package conformance

import (
	"errors"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// shape is a kind of hold other than the mutex, as the properties below that
// hold for every kind take it.
type shape struct {
	name string
	// hold are the options of the holder under test; rival those of a request
	// that the holder (with fill more holders like it) keeps out.
	hold, rival []lock.Option
	fill        int
	// raw sets a driver request to the shape.
	raw func(*driver.Request)
}

// shapes lists the driver's shapes besides the mutex; it skips the property
// when there are none.
func (e *env) shapes() []shape {
	e.Helper()
	var s []shape
	if e.caps.Shared {
		s = append(s, shape{
			name: "shared", hold: []lock.Option{lock.WithShared(true)}, rival: nil,
			raw: func(r *driver.Request) { r.Shared = true },
		})
	}
	if e.caps.Permits {
		n := lock.WithPermits(2)
		s = append(s, shape{
			name: "permit", hold: []lock.Option{n}, rival: []lock.Option{n}, fill: 1,
			raw: func(r *driver.Request) { r.Permits = 2 },
		})
	}
	if len(s) == 0 {
		e.Skip("driver declares neither shared locks nor semaphores (Capabilities.Shared and Permits are false)")
	}
	return s
}

// filled takes fill holds of the shape on key from their own clients.
func (e *env) filled(s shape, key string) []*lock.Lock {
	e.Helper()
	var ls []*lock.Lock
	for i := 0; i < s.fill; i++ {
		ls = append(ls, e.acquire(e.client(s.hold...), key))
	}
	return ls
}

// Every grant on a key takes a token larger than every token granted before it
// there, whatever its shape: readers held together, the writer after them (so
// its token fences them all), readers after the writer; permits held together.
func testTokensIncreaseAcrossSharedExclusiveAndPermitGrants(e *env) {
	e.needFencing()
	for _, s := range e.shapes() {
		key := e.key + "/" + s.name
		a, b, c := e.client(s.hold...), e.client(s.hold...), e.client(s.rival...)
		var last uint64
		next := func(l *lock.Lock, what string) *lock.Lock {
			e.Helper()
			if tok := e.token(l); tok <= last {
				e.Fatalf("%s: %s got token %d after %d: tokens must increase across shapes", s.name, what, tok, last)
			} else {
				last = tok
			}
			return l
		}
		for round := 0; round < 3; round++ {
			x := next(e.acquire(a, key), s.name+" holder")
			y := next(e.acquire(b, key), "a second "+s.name+" holder beside it")
			e.release(x)
			e.release(y)
			z := next(e.acquire(c, key), "the rival after them")
			e.release(z)
		}
	}
}

// A shared or permit holder whose hold passed to another (by expiry, or by its
// session being severed) can neither refresh nor release the new holder's
// hold: both say ErrNotHeld, Lost closes, and the key stays taken.
func testStaleSharedAndPermitHoldersCannotFreeOthers(e *env) {
	for _, s := range e.shapes() {
		for _, release := range []bool{true, false} {
			key := e.key + "/" + s.name + map[bool]string{true: "/release", false: "/refresh"}[release]
			fill := e.filled(s, key)
			a, da := e.clientAndDriver(s.hold...)
			var stale *lock.Lock
			if e.caps.Expiring {
				stale = e.acquire(a, key, lock.WithAutoRefresh(false))
			} else {
				stale = e.acquire(a, key)
				if err := e.h.Sever(e.ctx, da); err != nil {
					e.Fatalf("Harness.Sever: %v", err)
				}
			}
			current := e.acquire(e.client(s.rival...), key)
			var err error
			if release {
				err = stale.Release(e.ctx)
			} else {
				err = stale.Refresh(e.ctx)
			}
			if !errors.Is(err, lock.ErrNotHeld) {
				e.Fatalf("%s: Release or Refresh by the stale holder = %v, want ErrNotHeld", s.name, err)
			}
			if !isClosed(stale.Lost()) {
				e.Errorf("%s: Lost() of the stale holder still open", s.name)
			}
			e.requireLocked(e.client(s.rival...), key, s.name+": the new holder must keep the key after the stale holder's call")
			if err := current.Refresh(e.ctx); err != nil {
				e.Fatalf("%s: the new holder's Refresh after the stale holder's call: %v", s.name, err)
			}
			e.release(current)
			for _, l := range fill {
				e.release(l)
			}
		}
		if e.caps.Expiring {
			e.checkRawStaleRelease(s)
		}
	}
}

// checkRawStaleRelease: a holder paused past its TTL has not seen its own
// deadline, so its Release and Refresh reach the driver, which must refuse
// them and keep the new holder's hold.
func (e *env) checkRawStaleRelease(s shape) {
	e.Helper()
	key := e.key + "/" + s.name + "/raw"
	fill := e.filled(s, key)
	d, d2 := e.rawDriver(), e.rawDriver()
	stale := &driver.Request{Key: key, Owner: newOwner(), TTL: e.ttl, Lost: driver.LostFunc(func(error) {})}
	s.raw(stale)
	next := &driver.Request{Key: key, Owner: newOwner(), TTL: e.ttl, Lost: driver.LostFunc(func(error) {})}
	if s.rival != nil {
		s.raw(next)
	}
	if _, err := d.TryAcquire(e.ctx, stale); err != nil {
		e.Fatalf("%s: driver TryAcquire: %v", s.name, err)
	}
	e.rawAcquire(d2, next)
	if err := d.Release(e.ctx, stale); !errors.Is(err, driver.ErrNotHeld) {
		e.Errorf("%s: driver Release by the expired holder = %v, want ErrNotHeld", s.name, err)
	}
	if err := d.Refresh(e.ctx, stale); !errors.Is(err, driver.ErrNotHeld) {
		e.Errorf("%s: driver Refresh by the expired holder = %v, want ErrNotHeld", s.name, err)
	}
	e.requireLocked(e.client(s.rival...), key, s.name+": the new holder must keep the key after the expired holder's Release")
	if err := d2.Release(e.ctx, next); err != nil {
		e.Errorf("%s: new holder's Release: %v", s.name, err)
	}
	for _, l := range fill {
		e.release(l)
	}
}

// Shared and permit holders see Lost when their session is severed, and Close
// of their Locker releases them at once, as for the mutex.
func testSharedAndPermitHoldersSeeLostAndAreReleasedByClose(e *env) {
	for _, s := range e.shapes() {
		key := e.key + "/" + s.name
		fill := e.filled(s, key)
		a, da := e.clientAndDriver(s.hold...)
		l := e.acquire(a, key)
		if err := e.h.Sever(e.ctx, da); err != nil {
			e.Fatalf("Harness.Sever: %v", err)
		}
		e.waitClosed(l.Lost(), e.ttl+lossSlack, s.name+": Lost() after the session was severed")
		if err := l.Release(e.ctx); !errors.Is(err, lock.ErrNotHeld) {
			e.Errorf("%s: Release of a severed hold = %v, want ErrNotHeld", s.name, err)
		}

		b := e.client(s.hold...)
		l2 := e.acquire(b, key)
		if err := b.Close(); err != nil {
			e.Fatalf("%s: Close: %v", s.name, err)
		}
		if !isClosed(l2.Lost()) {
			e.Errorf("%s: Lost() still open after Close", s.name)
		}
		r, err := e.client(s.rival...).TryAcquire(e.ctx, key)
		if err != nil {
			e.Fatalf("%s: TryAcquire after the holder's Close: %v (Close did not release)", s.name, err)
		}
		e.release(r)
		for _, f := range fill {
			e.release(f)
		}
	}
}
