package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// lockSet is what the set properties use of a *lock.LockSet, so that the
// suite's self-tests can hand them a broken way of taking sets.
type lockSet interface {
	Keys() []string
	Lock(key string) *lock.Lock
	Lost() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// takeSet takes keys as one set with AcquireAll (TryAcquireAll if try).
var takeSet = func(ctx context.Context, lk *lock.Locker, keys []string, try bool) (lockSet, error) {
	var (
		s   *lock.LockSet
		err error
	)
	if try {
		s, err = lk.TryAcquireAll(ctx, keys)
	} else {
		s, err = lk.AcquireAll(ctx, keys)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// setDeadlockBound bounds the contention of SetsNamedInOppositeOrdersNeverDeadlockNorOverlap:
// far beyond what its rounds take on a loaded machine, and what a deadlock
// (each client holding a key the other waits for) runs into.
var setDeadlockBound = 60 * time.Second

// setKey is key i of the property's sets.
func (e *env) setKey(i int) string { return fmt.Sprintf("%s/%d", e.key, i) }

// keyOf returns the Key of err's *lock.Error, or "".
func keyOf(err error) string {
	var le *lock.Error
	if errors.As(err, &le) {
		return le.Key
	}
	return ""
}

// Two clients take overlapping sets, naming the keys in opposite orders, two
// goroutines each, many times: every round completes (no deadlock), and no
// key ever has two holders.
func testSetsNamedInOppositeOrdersNeverDeadlockNorOverlap(e *env) {
	const goroutines, rounds = 2, 6
	keys := []string{e.setKey(0), e.setKey(1), e.setKey(2)}
	reversed := slices.Clone(keys)
	slices.Reverse(reversed)
	ctx, cancel := context.WithTimeout(e.ctx, setDeadlockBound)
	defer cancel()
	var (
		inside [3]atomic.Int32
		done   atomic.Int32
		book   failures
		wg     sync.WaitGroup
	)
	for _, order := range [][]string{keys, reversed} {
		lk := e.client()
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					s, err := takeSet(ctx, lk, order, false)
					if err != nil {
						book.add("AcquireAll(%q) in round %d: %v (a deadlock runs into the %v bound)", order, r, err, setDeadlockBound)
						return
					}
					for i := range inside {
						if n := inside[i].Add(1); n > 1 {
							book.add("key %s has %d holders at once", keys[i], n)
						}
					}
					runtime.Gosched()
					for i := range inside {
						inside[i].Add(-1)
					}
					if err := s.Release(e.ctx); err != nil {
						book.add("Release: %v", err)
						return
					}
					done.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	book.report(e)
	if want := int32(2 * goroutines * rounds); done.Load() != want {
		e.Errorf("%d sets taken and released, want %d", done.Load(), want)
	}
}

// TryAcquireAll of a set with one key held elsewhere fails with ErrLocked
// naming that key, and leaves none of the others held: a second client takes
// each of them at once.
func testTryAcquireAllWithOneHeldKeyLeavesNoneHeld(e *env) {
	a, b := e.client(), e.client()
	keys := []string{e.setKey(0), e.setKey(1), e.setKey(2)}
	blocker := e.acquire(b, keys[1])
	s, err := takeSet(e.ctx, a, keys, true)
	if err == nil {
		_ = s.Release(e.ctx)
		e.Fatalf("TryAcquireAll with %s held elsewhere succeeded, want ErrLocked", keys[1])
	}
	if !isErr(err, lock.ErrLocked) || keyOf(err) != keys[1] {
		e.Errorf("TryAcquireAll with %s held elsewhere = %v, want ErrLocked naming that key", keys[1], err)
	}
	for _, k := range []string{keys[0], keys[2]} {
		e.release(e.tryAcquire(b, k, "TryAcquireAll failed and must have given it back"))
	}
	e.release(blocker)
}

// tryAcquire takes key at once or fails the property, saying why it should
// have been free.
func (e *env) tryAcquire(lk *lock.Locker, key, why string) *lock.Lock {
	e.Helper()
	l, err := lk.TryAcquire(e.ctx, key)
	if err != nil {
		e.Fatalf("TryAcquire(%q) = %v, want the key free: %s", key, err, why)
	}
	return l
}

// An AcquireAll whose context ends while it waits for its last key (the
// others taken) returns the context's error naming that key, and leaves
// nothing held.
func testAcquireAllEndedMidwayLeavesNothingHeld(e *env) {
	keys := []string{e.setKey(0), e.setKey(1), e.setKey(2)}
	d, err := e.h.NewDriver(e.ctx)
	if err != nil {
		e.Fatalf("Harness.NewDriver: %v", err)
	}
	// The set asks its driver for keys[2] only once keys[0] and keys[1] are
	// its own: the spy says when, so the cancel comes while it waits there.
	spy := &acquireSpy{Driver: d, key: keys[2], asked: make(chan struct{})}
	var spied driver.Driver = spy
	if _, ok := d.(driver.Acquirer); ok {
		spied = acquirerSpy{spy}
	}
	a, b := e.locker(spied), e.client()
	blocker := e.acquire(b, keys[2])
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		s, err := takeSet(ctx, a, keys, false)
		if err == nil {
			_ = s.Release(e.ctx)
		}
		result <- err
	}()
	select {
	case <-spy.asked:
	case err := <-result:
		e.Fatalf("AcquireAll returned %v before it asked for %s, which is held elsewhere", err, keys[2])
	case <-e.ctx.Done():
		e.Fatalf("AcquireAll never asked for %s", keys[2])
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) || keyOf(err) != keys[2] {
			e.Errorf("AcquireAll ended by its context = %v, want context.Canceled naming %s", err, keys[2])
		}
	case <-e.ctx.Done():
		e.Fatal("AcquireAll did not return after its context ended")
	}
	for _, k := range keys[:2] {
		e.release(e.tryAcquire(b, k, "the ended AcquireAll must have given it back"))
	}
	e.release(blocker)
}

// acquireSpy is a driver that closes asked when it is first asked for key.
type acquireSpy struct {
	driver.Driver
	key   string
	asked chan struct{}
	once  sync.Once
}

func (s *acquireSpy) saw(req *driver.Request) {
	if strings.HasSuffix(req.Key, s.key) {
		s.once.Do(func() { close(s.asked) })
	}
}

// acquirerSpy is an acquireSpy over a driver that waits itself (driver.Acquirer).
type acquirerSpy struct{ *acquireSpy }

func (s acquirerSpy) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	s.saw(req)
	return s.Driver.(driver.Acquirer).Acquire(ctx, req)
}

func (s *acquireSpy) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	s.saw(req)
	return s.Driver.TryAcquire(ctx, req)
}

// A member lost (its session severed, or the member force-released where
// the driver can evict) closes the set's Lost, and Err matches ErrLost and
// names a member's key: the evicted one's, when one member was evicted.
func testLostMemberClosesTheSetsLostNamingItsKey(e *env) {
	keys := []string{e.setKey(0), e.setKey(1)}
	a, da := e.clientAndDriver()
	s, err := takeSet(e.ctx, a, keys, false)
	if err != nil {
		e.Fatalf("AcquireAll: %v", err)
	}
	if err := e.h.Sever(e.ctx, da); err != nil {
		e.Fatalf("Harness.Sever: %v", err)
	}
	e.waitClosed(s.Lost(), e.ttl+lossSlack, "the set's Lost() after its client's session was severed")
	if err := s.Err(); !isErr(err, lock.ErrLost) || !slices.Contains(keys, keyOf(err)) {
		e.Errorf("the severed set's Err = %v, want ErrLost naming one of %q", err, keys)
	}
	_ = s.Release(e.ctx) // its members are lost; the release only tidies

	op, d := e.clientAndDriver()
	if _, ok := d.(driver.Evictor); !ok {
		e.Log("the driver cannot evict (no driver.Evictor): the one-member part is skipped")
		return
	}
	keys = []string{e.setKey(2), e.setKey(3)}
	s, err = takeSet(e.ctx, e.client(), keys, false)
	if err != nil {
		e.Fatalf("AcquireAll: %v", err)
	}
	if err := op.ForceRelease(e.ctx, keys[1]); err != nil {
		e.Fatalf("ForceRelease(%q): %v", keys[1], err)
	}
	e.waitClosed(s.Lost(), e.ttl+lossSlack, "the set's Lost() after a member was force-released")
	if err := s.Err(); !isErr(err, lock.ErrLost) || keyOf(err) != keys[1] {
		e.Errorf("Err after %s was force-released = %v, want ErrLost naming it", keys[1], err)
	}
	_ = s.Release(e.ctx)
}

// Each member of a set keeps its own fencing token, and tokens of every
// member increase from set to set, across clients, as for single locks.
func testSetMemberTokensIncreaseAsForSingleLocks(e *env) {
	e.needFencing()
	keys := []string{e.setKey(0), e.setKey(1)}
	last := map[string]uint64{}
	for round := 0; round < 3; round++ {
		s, err := takeSet(e.ctx, e.client(), keys, round%2 == 1)
		if err != nil {
			e.Fatalf("round %d: %v", round, err)
		}
		for _, k := range keys {
			l := s.Lock(k)
			if l == nil {
				e.Fatalf("round %d: the set has no member %s", round, k)
			}
			if tok := e.token(l); tok <= last[k] {
				e.Errorf("round %d: member %s got token %d after %d", round, k, tok, last[k])
			} else {
				last[k] = tok
			}
		}
		if err := s.Release(e.ctx); err != nil {
			e.Fatalf("Release: %v", err)
		}
		single := e.acquire(e.client(), keys[0])
		if tok := e.token(single); tok <= last[keys[0]] {
			e.Errorf("a single lock after the set got token %d after the member's %d", tok, last[keys[0]])
		} else {
			last[keys[0]] = tok
		}
		e.release(single)
	}
}
