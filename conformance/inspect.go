package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// clockSlack is how far the backend's clock (Since, Expires) may be from the
// test's: same machine here, but a backend may round to its own units.
const clockSlack = time.Second

func (e *env) needInterface(ok bool, name, what string) {
	e.Helper()
	if !ok {
		e.Skipf("driver does not implement driver.%s: %s is ErrUnsupported there", name, what)
	}
}

// inspector opens a client whose driver must implement driver.Inspector.
func (e *env) inspector() *lock.Locker {
	e.Helper()
	lk, d := e.clientAndDriver()
	_, ok := d.(driver.Inspector)
	e.needInterface(ok, "Inspector", "Inspect, Leader and Observe")
	return lk
}

func (e *env) inspect(lk *lock.Locker, key string) lock.Info {
	e.Helper()
	in, err := lk.Inspect(e.ctx, key)
	if err != nil {
		e.Fatalf("Inspect(%q): %v", key, err)
	}
	return in
}

// Inspect reports what the holders know: held or free, how many hold and in
// what shape, the latest token, each holder's name, when it began and when it
// ends, and how many wait.
func testInspectAgreesWithHolders(e *env) {
	ins := e.inspector()
	if in := e.inspect(ins, e.key); in.Held || in.Holders != 0 || in.Owner != "" {
		e.Fatalf("Inspect of a key no one ever held: %+v, want not held", in)
	}

	before := time.Now()
	a := e.acquire(e.client(lock.WithOwnerName("alpha")), e.key)
	in := e.inspect(ins, e.key)
	e.checkInfo(in, "an exclusive holder", 1, false, []string{"alpha"}, before)
	if e.caps.Fencing && in.Token != e.token(a) {
		e.Errorf("Inspect's token %d, the holder's %d", in.Token, e.token(a))
	}

	// A waiter shows in Waiters, where the backend can count them.
	wctx, cancel := context.WithCancel(e.ctx)
	waited := make(chan error, 1)
	w := e.client(lock.WithOwnerName("waiter"))
	go func() {
		l, err := w.Acquire(wctx, e.key)
		if err == nil {
			err = l.Release(e.ctx)
		}
		waited <- err
	}()
	e.eventually("Inspect to count the waiter", func() (bool, string) {
		in := e.inspect(ins, e.key)
		return in.Waiters != 0, fmt.Sprintf("Waiters %d", in.Waiters)
	})
	if in := e.inspect(ins, e.key); in.Waiters != 1 && in.Waiters != -1 {
		e.Errorf("Inspect with one waiter: Waiters %d, want 1 (or -1 where the backend cannot know)", in.Waiters)
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		e.Errorf("the cancelled waiter: %v, want context.Canceled", err)
	}
	e.release(a)
	e.eventually("Inspect to show the key free after the release", func() (bool, string) {
		in := e.inspect(ins, e.key)
		return !in.Held && in.Holders == 0, fmt.Sprintf("%+v", in)
	})

	for _, s := range e.shapesOrNone() {
		key := e.key + "/" + s.name
		before := time.Now()
		x := e.acquire(e.client(append(s.hold, lock.WithOwnerName("x"))...), key)
		y := e.acquire(e.client(append(s.hold, lock.WithOwnerName("y"))...), key)
		in := e.inspect(ins, key)
		e.checkInfo(in, "two "+s.name+" holders", 2, s.name == "shared", []string{"x", "y"}, before)
		if s.name == "permit" && in.Permits != 2 {
			e.Errorf("Inspect of a semaphore of 2: Permits %d", in.Permits)
		}
		if e.caps.Fencing && in.Token != max(e.token(x), e.token(y)) {
			e.Errorf("Inspect of two %s holders: token %d, theirs %d and %d", s.name, in.Token, e.token(x), e.token(y))
		}
		e.release(x)
		e.release(y)
	}
}

// shapesOrNone is shapes without the skip.
func (e *env) shapesOrNone() []shape {
	if !e.caps.Shared && !e.caps.Permits {
		return nil
	}
	return e.shapes()
}

func (e *env) checkInfo(in lock.Info, what string, holders int, shared bool, owners []string, before time.Time) {
	e.Helper()
	now := time.Now()
	if !in.Held || in.Holders != holders || in.Shared != shared {
		e.Errorf("Inspect with %s: Held %v Holders %d Shared %v, want true %d %v", what, in.Held, in.Holders, in.Shared, holders, shared)
	}
	got := slices.Clone(in.Owners)
	slices.Sort(got)
	if !slices.Equal(got, owners) || !slices.Contains(owners, in.Owner) {
		e.Errorf("Inspect with %s: Owner %q Owners %q, want %q", what, in.Owner, in.Owners, owners)
	}
	if in.Since.Before(before.Add(-clockSlack)) || in.Since.After(now.Add(clockSlack)) {
		e.Errorf("Inspect with %s: Since %v, want between %v and %v", what, in.Since, before, now)
	}
	switch {
	case e.caps.Expiring && (in.Expires.Before(now.Add(-clockSlack)) || in.Expires.After(now.Add(e.ttl+clockSlack))):
		e.Errorf("Inspect with %s: Expires %v, want within a TTL (%v) from %v", what, in.Expires, e.ttl, now)
	case !e.caps.Expiring && !in.Expires.IsZero():
		e.Errorf("Inspect with %s: Expires %v on a session-bound backend, want zero", what, in.Expires)
	}
}

// eventually waits until cond holds, failing after eventuallyBound.
func (e *env) eventually(what string, cond func() (bool, string)) {
	e.Helper()
	deadline := time.Now().Add(eventuallyBound)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.Fatalf("waiting for %s: not within %v (%s)", what, eventuallyBound, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eventuallyBound bounds what must happen "soon": a watch firing, a listing
// catching up.
const eventuallyBound = 5 * time.Second

// List returns the held keys under a prefix, sorted, and no others.
func testListShowsHeldKeysUnderAPrefix(e *env) {
	lk, d := e.clientAndDriver()
	_, ok := d.(driver.Lister)
	e.needInterface(ok, "Lister", "List")
	p := e.key + "/"
	held := []*lock.Lock{e.acquire(lk, p+"b"), e.acquire(lk, p+"a"), e.acquire(lk, e.key+"-other")}
	e.release(e.acquire(lk, p+"c"))
	want := []string{p + "a", p + "b"}
	e.eventually("List to show the held keys", func() (bool, string) {
		got, err := lk.List(e.ctx, p)
		if err != nil {
			e.Fatalf("List(%q): %v", p, err)
		}
		return slices.Equal(got, want), fmt.Sprintf("List(%q) = %q, want %q", p, got, want)
	})
	for _, l := range held {
		e.release(l)
	}
	e.eventually("List to show nothing after the releases", func() (bool, string) {
		got, err := lk.List(e.ctx, p)
		if err != nil {
			e.Fatalf("List(%q): %v", p, err)
		}
		return len(got) == 0, fmt.Sprintf("List(%q) = %q", p, got)
	})
}

// ForceRelease frees a key whoever holds it: the evicted holder learns it was
// forced (Lost closes, Err matches ErrForceReleased) within its TTL, the next
// holder's token is larger, and the evicted holder's Release does not free
// the next holder's lock.
func testForceReleaseEvictsAndFences(e *env) {
	op, d := e.clientAndDriver()
	_, ok := d.(driver.Evictor)
	e.needInterface(ok, "Evictor", "ForceRelease")
	if err := op.ForceRelease(e.ctx, e.key); !errors.Is(err, lock.ErrNotHeld) {
		e.Errorf("ForceRelease of a free key: %v, want ErrNotHeld", err)
	}
	a := e.acquire(e.client(), e.key)
	if err := op.ForceRelease(e.ctx, e.key); err != nil {
		e.Fatalf("ForceRelease: %v", err)
	}
	b := e.acquire(e.client(), e.key)
	if e.caps.Fencing && e.token(b) <= e.token(a) {
		e.Errorf("token %d after the evicted holder's %d", e.token(b), e.token(a))
	}
	e.waitClosed(a.Lost(), e.ttl+lossSlack, "the evicted holder's Lost")
	if err := a.Err(); !errors.Is(err, lock.ErrForceReleased) || !errors.Is(err, lock.ErrLost) {
		e.Errorf("the evicted holder's Err: %v, want ErrLost and ErrForceReleased", err)
	}
	if err := a.Release(e.ctx); !errors.Is(err, lock.ErrNotHeld) {
		e.Errorf("the evicted holder's Release: %v, want ErrNotHeld", err)
	}
	e.requireLocked(e.client(), e.key, "the evicted holder's Release must not free the next holder's lock")
	e.release(b)

	for _, s := range e.shapesOrNone() {
		key := e.key + "/" + s.name
		x, y := e.acquire(e.client(s.hold...), key), e.acquire(e.client(s.hold...), key)
		if err := op.ForceRelease(e.ctx, key); err != nil {
			e.Fatalf("ForceRelease of two %s holders: %v", s.name, err)
		}
		for _, l := range []*lock.Lock{x, y} {
			e.waitClosed(l.Lost(), e.ttl+lossSlack, "an evicted "+s.name+" holder's Lost")
		}
		z := e.acquire(e.client(s.rival...), key)
		if e.caps.Fencing && e.token(z) <= max(e.token(x), e.token(y)) {
			e.Errorf("%s: token %d after the evicted holders' %d and %d", s.name, e.token(z), e.token(x), e.token(y))
		}
		e.release(z)
	}
}
