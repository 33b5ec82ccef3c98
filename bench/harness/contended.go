package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrGaveUp is what Client.Acquire returns when the library stopped waiting on
// its own (its retry budget ran out) while the key stayed held elsewhere.
var ErrGaveUp = errors.New("harness: library gave up waiting")

// runContended has Config.Contenders goroutines over two clients take turns on
// one key with a tiny critical section. It reports handoffs per second (an
// acquisition by another goroutine than the previous holder), the handoff
// latency (from the previous holder starting its release to the next holder
// holding), the p99 of the time each Acquire waited, the smallest share of
// acquisitions one goroutine got as a fraction of the fair share, how often the
// library gave up waiting, and mutual-exclusion violations: a counter shared by
// the goroutines must read 1 inside every critical section.
func runContended(ctx context.Context, r *Results, c *Contestant, rep int) error {
	clients, closeAll, err := openClients(ctx, c, 2, 0)
	if err != nil {
		return err
	}
	defer closeAll()
	key := runKey(Contended)
	n := r.Config.Contenders

	var (
		inside     atomic.Int32 // holders in the critical section
		violations atomic.Int64
		gaveUp     atomic.Int64
		counting   atomic.Bool

		mu          sync.Mutex // guards the bookkeeping below
		last        = -1       // goroutine of the previous holder
		lastRelease time.Time  // when it started to release
		handoffs    int
		latencies   []time.Duration
		counts      = make([]int, n)

		waits = make([][]time.Duration, n)
		wg    sync.WaitGroup
		errs  = make(chan error, n)
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[g%len(clients)]
			for runCtx.Err() == nil {
				asked := time.Now()
				release, err := cl.Acquire(runCtx, key)
				switch {
				case errors.Is(err, ErrGaveUp):
					if counting.Load() {
						gaveUp.Add(1)
					}
					continue
				case err != nil && runCtx.Err() != nil:
					return
				case err != nil:
					errs <- fmt.Errorf("acquire: %w", err)
					cancel()
					return
				}
				held := time.Now()
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				rec := counting.Load()
				mu.Lock()
				if rec {
					counts[g]++
					waits[g] = append(waits[g], held.Sub(asked))
					if last != g && last != -1 {
						handoffs++
						latencies = append(latencies, held.Sub(lastRelease))
					}
				}
				last = g
				lastRelease = time.Now()
				mu.Unlock()
				inside.Add(-1)
				if err := release(ctx); err != nil {
					errs <- fmt.Errorf("release: %w", err)
					cancel()
					return
				}
			}
		}()
	}
	sleepCtx(runCtx, r.Config.Warmup)
	counting.Store(true)
	begin := time.Now()
	sleepCtx(runCtx, r.Config.Window)
	counting.Store(false)
	took := time.Since(begin)
	cancel()
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return err
	}

	var all []time.Duration
	total, least := 0, counts[0]
	for g := range n {
		all = append(all, waits[g]...)
		total += counts[g]
		least = min(least, counts[g])
	}
	r.set(c, Violations, rep, float64(violations.Load()))
	r.set(c, GaveUp, rep, float64(gaveUp.Load()))
	r.set(c, Handoffs, rep, float64(handoffs)/took.Seconds())
	if total > 0 {
		r.set(c, MinShare, rep, float64(least)/(float64(total)/float64(n)))
	}
	if len(latencies) > 0 {
		r.set(c, HandoffP50, rep, micros(Percentile(latencies, 50)))
		r.set(c, HandoffP99, rep, micros(Percentile(latencies, 99)))
	}
	if len(all) > 0 {
		r.set(c, WaitP99, rep, float64(Percentile(all, 99))/float64(time.Millisecond))
	}
	return nil
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
