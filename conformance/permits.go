package conformance

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock"
)

// semaphorePermits is the n of the semaphore properties.
const semaphorePermits = 3

func (e *env) needPermits() {
	if !e.caps.Permits {
		e.Skip("driver declares no semaphores (Capabilities.Permits is false); BadOptionsAreRejected checks WithPermits above 1 is refused")
	}
}

// n clients take the n permits; the next one is refused, and a waiter takes
// the permit the first holder gives back.
func testPermitsAdmitNHoldersAndNoMore(e *env) {
	e.needPermits()
	n := lock.WithPermits(semaphorePermits)
	var held []*lock.Lock
	for i := 0; i < semaphorePermits; i++ {
		l, err := e.client(n).TryAcquire(e.ctx, e.key)
		if err != nil {
			e.Fatalf("permit %d of %d: %v", i+1, semaphorePermits, err)
		}
		held = append(held, l)
	}
	late := e.client(n)
	e.requireLocked(late, e.key, "all permits are held")
	got := make(chan *lock.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := late.Acquire(e.ctx, e.key)
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	e.release(held[0])
	select {
	case l := <-got:
		held[0] = l
	case err := <-errc:
		e.Fatalf("Acquire of the permit given back: %v", err)
	case <-e.ctx.Done():
		e.Fatal("the waiter never took the permit given back")
	}
	e.requireLocked(e.client(n), e.key, "the waiter took the permit given back")
	for _, l := range held {
		e.release(l)
	}
}

// At least 3n clients, two goroutines each, on one semaphore of n permits:
// an independent counter never sees more than n holders, and every critical
// section runs.
func testPermitHoldersNeverExceedNUnderContention(e *env) {
	e.needPermits()
	const clients, goroutines, rounds = 3 * semaphorePermits, 2, 8
	var (
		inside, most atomic.Int32
		count        atomic.Int32
		book         failures
		wg           sync.WaitGroup
	)
	for c := 0; c < clients; c++ {
		lk := e.client(lock.WithPermits(semaphorePermits))
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					l, err := lk.Acquire(e.ctx, e.key)
					if err != nil {
						book.add("Acquire: %v", err)
						return
					}
					n := inside.Add(1)
					if n > semaphorePermits {
						book.add("%d permit holders at once, want at most %d", n, semaphorePermits)
					}
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					count.Add(1)
					runtime.Gosched()
					inside.Add(-1)
					if err := l.Release(e.ctx); err != nil {
						book.add("Release: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	book.report(e)
	e.Logf("at most %d permit holders at once seen, of %d permits", most.Load(), semaphorePermits)
	if want := clients * goroutines * rounds; int(count.Load()) != want {
		e.Errorf("%d critical sections ran, want %d", count.Load(), want)
	}
}

// A permit holder that stops refreshing (on expiring drivers) and one whose
// client is closed under it (a crash) free their permits within the TTL: two
// other clients then take them.
func testStoppedPermitHoldersFreeTheirPermitsWithinTTL(e *env) {
	e.needPermits()
	const n = 2
	opt := lock.WithPermits(n)
	crashed, dc := e.clientAndDriver(opt)
	stopped, ds := e.clientAndDriver(opt)
	var l1, l2 *lock.Lock
	l1 = e.acquire(crashed, e.key)
	if e.caps.Expiring {
		l2 = e.acquire(stopped, e.key, lock.WithAutoRefresh(false))
	} else {
		l2 = e.acquire(stopped, e.key) // session-bound: a crash is the only way to stop
	}
	start := time.Now()
	if err := dc.Close(); err != nil {
		e.Fatalf("closing the holder's driver: %v", err)
	}
	if !e.caps.Expiring {
		if err := ds.Close(); err != nil {
			e.Fatalf("closing the holder's driver: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.ttl+lossSlack)
	defer cancel()
	for i := 0; i < n; i++ {
		l, err := e.client(opt).Acquire(ctx, e.key)
		if err != nil {
			e.Fatalf("permit %d of %d after its holder stopped: %v, want it within the TTL %v", i+1, n, err, e.ttl)
		}
		defer e.release(l)
	}
	e.figure("stopped-permit-holders-superseded-after", time.Since(start))
	e.waitClosed(l1.Lost(), e.ttl+lossSlack, "Lost() of the crashed permit holder")
	e.waitClosed(l2.Lost(), e.ttl+lossSlack, "Lost() of the permit holder that stopped refreshing")
}

// WithPermits(1) is the exclusive lock, on every driver: it and a plain
// Acquire exclude each other.
func testOnePermitIsTheExclusiveLock(e *env) {
	one, plain := e.client(lock.WithPermits(1)), e.client()
	l := e.acquire(one, e.key)
	e.requireLocked(plain, e.key, "a holder of the only permit holds the exclusive lock")
	e.requireLocked(one, e.key, "the only permit is taken")
	e.release(l)
	l = e.acquire(plain, e.key)
	if _, err := one.TryAcquire(e.ctx, e.key); !isErr(err, lock.ErrLocked) {
		e.Fatalf("TryAcquire with WithPermits(1) while the exclusive lock is held = %v, want ErrLocked", err)
	}
	e.release(l)
}
