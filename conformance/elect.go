package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// campaign wins the election name for lk within the property's time.
func (e *env) campaign(lk *lock.Locker, name, value string) *lock.Leadership {
	e.Helper()
	ld, err := lk.Campaign(e.ctx, name, value)
	if err != nil {
		e.Fatalf("Campaign(%q): %v", name, err)
	}
	return ld
}

// Among campaigners that resign after a short term, at most one leads at any
// moment (counted by the test, not the backend), every campaigner gets terms,
// and terms strictly increase.
func testExactlyOneLeaderAmongCampaigners(e *env) {
	const campaigners, termsEach = 4, 5
	var (
		leaders atomic.Int32
		book    failures
		mu      sync.Mutex
		terms   []uint64
		wg      sync.WaitGroup
	)
	for i := 0; i < campaigners; i++ {
		lk := e.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := 0; t < termsEach; t++ {
				ld, err := lk.Campaign(e.ctx, e.key, fmt.Sprintf("c%d", i))
				if err != nil {
					book.add("Campaign: %v", err)
					return
				}
				if n := leaders.Add(1); n != 1 {
					book.add("%d leaders at once", n)
				}
				if e.caps.Fencing {
					mu.Lock()
					terms = append(terms, ld.Token())
					mu.Unlock()
				}
				time.Sleep(2 * time.Millisecond) // the leader's work, not an ordering
				leaders.Add(-1)
				if err := ld.Resign(e.ctx); err != nil {
					book.add("Resign: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	book.report(e)
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			e.Errorf("term %d after term %d: terms must strictly increase (all: %v)", terms[i], terms[i-1], terms)
		}
	}
}

// Resign hands the leadership to a waiting campaigner promptly: the median
// handover is within the wake-up bound of a release (woken by the backend on
// drivers that declare Notify).
func testResignHandsOverPromptly(e *env) {
	bound := WakeBound
	if !e.caps.Notify {
		bound = pollWakeBound
	}
	a, b := e.client(), e.client()
	const rounds = 7
	gaps := make([]time.Duration, 0, rounds)
	for i := 0; i < rounds; i++ {
		leader, next := a, b
		if i%2 == 1 {
			leader, next = b, a
		}
		ld := e.campaign(leader, e.key, "leader")
		won := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			nl, err := next.Campaign(e.ctx, e.key, "next")
			if err != nil {
				errc <- err
				return
			}
			won <- time.Now()
			_ = nl.Resign(e.ctx)
		}()
		e.eventuallyWaiting(leader, e.key)
		resigned := time.Now()
		if err := ld.Resign(e.ctx); err != nil {
			e.Fatalf("Resign: %v", err)
		}
		select {
		case at := <-won:
			gaps = append(gaps, at.Sub(resigned))
		case err := <-errc:
			e.Fatalf("the waiting campaigner: %v", err)
		case <-e.ctx.Done():
			e.Fatal("the waiting campaigner never led")
		}
	}
	slices.Sort(gaps)
	median := gaps[len(gaps)/2]
	e.figure("resign-handover", median)
	if median > bound {
		e.Errorf("the next campaigner led %v after a Resign (median of %d, max %v), want within %v", median, rounds, gaps[len(gaps)-1], bound)
	}
}

// eventuallyWaiting lets a campaign started just now queue: where the driver
// counts waiters it waits until Inspect shows one; elsewhere it pauses as
// BlockedWaiterWakesPromptlyOnRelease does (and, on polling drivers, lets the
// waiter back off to its cap).
func (e *env) eventuallyWaiting(lk *lock.Locker, key string) {
	in, err := lk.Inspect(e.ctx, key)
	if err != nil || in.Waiters == -1 || !e.caps.Notify {
		time.Sleep(100 * time.Millisecond)
		return
	}
	e.eventually("the campaigner to wait", func() (bool, string) {
		in, err := lk.Inspect(e.ctx, key)
		return err == nil && in.Waiters > 0, fmt.Sprintf("%+v %v", in, err)
	})
}

// Leader reports no leader, then the leader's value, name, term and start;
// Proclaim changes the value; a leader's options are checked.
func testLeaderReportsValueTermAndStart(e *env) {
	obs := e.inspector()
	if _, err := obs.Leader(e.ctx, e.key); !errors.Is(err, lock.ErrNoLeader) {
		e.Errorf("Leader with no campaign: %v, want ErrNoLeader", err)
	}
	lk, d := e.clientAndDriver(lock.WithOwnerName("node-1"))
	if _, err := lk.Campaign(e.ctx, e.key, "v", lock.WithShared(true)); !errors.Is(err, lock.ErrInvalidArgument) {
		e.Errorf("Campaign with WithShared: %v, want ErrInvalidArgument", err)
	}
	before := time.Now()
	ld := e.campaign(lk, e.key, "10.0.0.1:80")
	l, err := obs.Leader(e.ctx, e.key)
	if err != nil {
		e.Fatalf("Leader: %v", err)
	}
	if !l.Elected || l.Value != "10.0.0.1:80" || l.Owner != "node-1" || l.Name != e.key {
		e.Errorf("Leader = %+v, want elected, value 10.0.0.1:80, owner node-1", l)
	}
	if e.caps.Fencing && l.Token != ld.Token() {
		e.Errorf("Leader's term %d, the leader's own %d", l.Token, ld.Token())
	}
	if l.Since.Before(before.Add(-clockSlack)) || l.Since.After(time.Now().Add(clockSlack)) {
		e.Errorf("Leader's Since %v, want about %v", l.Since, before)
	}
	if _, ok := d.(driver.Labeler); ok {
		if err := ld.Proclaim(e.ctx, "10.0.0.2:80"); err != nil {
			e.Fatalf("Proclaim: %v", err)
		}
		if l, err := obs.Leader(e.ctx, e.key); err != nil || l.Value != "10.0.0.2:80" || ld.Value() != "10.0.0.2:80" {
			e.Errorf("after Proclaim: Leader = %+v, %v; Value() %q; want value 10.0.0.2:80", l, err, ld.Value())
		}
	}
	if err := ld.Resign(e.ctx); err != nil {
		e.Fatalf("Resign: %v", err)
	}
	if err := ld.Proclaim(e.ctx, "x"); err == nil {
		e.Errorf("Proclaim after Resign succeeded")
	}
	e.eventually("Leader to report no leader after Resign", func() (bool, string) {
		l, err := obs.Leader(e.ctx, e.key)
		return errors.Is(err, lock.ErrNoLeader), fmt.Sprintf("%+v %v", l, err)
	})
}

// observeBound is how soon Observe must report a change: a few looks of its
// fallback poll, far less where the backend tells of changes.
const observeBound = time.Second

// Observe reports the current state, then every leader and vacancy in order
// with strictly increasing terms and no repeats, and closes when its context
// ends.
func testObserveSeesEveryChangeInOrder(e *env) {
	obs := e.inspector()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch := obs.Observe(ctx, e.key)
	next := func(what string, want func(lock.Leader) bool) (lock.Leader, time.Duration) {
		e.Helper()
		start := time.Now()
		t := time.NewTimer(eventuallyBound)
		defer t.Stop()
		select {
		case l, ok := <-ch:
			if !ok {
				e.Fatalf("Observe closed while waiting for %s", what)
			}
			if !want(l) {
				e.Fatalf("Observe delivered %+v, want %s", l, what)
			}
			return l, time.Since(start)
		case <-t.C:
			e.Fatalf("Observe delivered nothing within %v, want %s", eventuallyBound, what)
		}
		return lock.Leader{}, 0
	}
	vacant := func(l lock.Leader) bool { return !l.Elected }
	next("no leader first", vacant)
	var last uint64
	var worst time.Duration
	for _, v := range []string{"a", "b", "c"} {
		lk := e.client()
		ld := e.campaign(lk, e.key, v)
		l, took := next("leader "+v, func(l lock.Leader) bool { return l.Elected && l.Value == v })
		worst = max(worst, took)
		if e.caps.Fencing {
			if l.Token != ld.Token() || l.Token <= last {
				e.Errorf("Observe: term %d for leader %s (its own %d), after %d", l.Token, v, ld.Token(), last)
			}
			last = l.Token
		}
		if err := ld.Resign(e.ctx); err != nil {
			e.Fatalf("Resign: %v", err)
		}
		_, took = next("no leader after "+v+" resigned", vacant)
		worst = max(worst, took)
	}
	e.figure("observe-latency", worst)
	if worst > observeBound {
		e.Errorf("Observe reported a change %v after it at worst, want within %v", worst, observeBound)
	}
	cancel()
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				return
			}
			e.Errorf("Observe delivered %+v after its context ended", l)
		case <-time.After(eventuallyBound):
			e.Fatalf("Observe's channel did not close within %v of its context ending", eventuallyBound)
			return
		}
	}
}

// A leader whose process is killed is replaced within its TTL (its session
// timeout where there is one), by a campaigner with a larger term.
func testKilledLeaderProcessIsReplaced(e *env) {
	e.needHolderProcesses()
	h := e.startLeader(e.key, e.ttl)
	h.Kill()
	killed := time.Now()
	bound := e.h.SessionTimeout + lossSlack
	if e.caps.Expiring {
		bound += e.ttl
	}
	ctx, cancel := e.boundedCtx(bound)
	defer cancel()
	ld, err := e.client().Campaign(ctx, e.key, "next")
	if err != nil {
		e.Fatalf("Campaign after the leader's process was killed: %v (bound %v)", err, bound)
	}
	e.figure("killed-leader-replaced-after", time.Since(killed))
	if e.caps.Fencing && ld.Token() <= h.token {
		e.Errorf("term %d after the killed leader's %d", ld.Token(), h.token)
	}
	if err := ld.Resign(e.ctx); err != nil {
		e.Fatalf("Resign: %v", err)
	}
}
