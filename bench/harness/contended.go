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

// contended has Config.Contenders goroutines over two clients take turns on
// one key with a tiny critical section. It reports handoffs per second (an
// acquisition by another goroutine than the previous holder), the handoff
// latency (from the previous holder starting its release to the next holder
// holding), the p99 of the time each Acquire waited (an Acquire still waiting
// when its turn ends counts with the time it had waited: a lower bound, so the
// share of such cut-off waits is reported too), the smallest share of
// acquisitions one goroutine got as a fraction of the fair share, how often the
// library gave up waiting, and mutual-exclusion violations: a counter shared by
// the goroutines must read 1 inside every critical section.
type contended struct {
	clients []Client
	key     string
	closeFn func()
	holdFor time.Duration

	// Totals over the recorded slices.
	took       time.Duration
	handoffs   int
	cutOff     int
	violations int64
	gaveUp     int64
	counts     []int
	latencies  []time.Duration
	waits      []time.Duration
}

func openContended(ctx context.Context, cfg Config, c *Contestant) (trial, error) {
	clients, closeAll, err := openClients(ctx, c, 2, 0)
	if err != nil {
		return nil, err
	}
	return &contended{clients: clients, key: runKey(Contended), closeFn: closeAll, counts: make([]int, cfg.Contenders), holdFor: cfg.HoldFor}, nil
}

func (t *contended) run(ctx context.Context, d time.Duration, record bool) error {
	n := len(t.counts)
	var (
		inside     atomic.Int32 // holders in the critical section
		violations atomic.Int64
		gaveUp     atomic.Int64

		mu          sync.Mutex // guards the bookkeeping below
		last        = -1       // goroutine of the previous holder in this slice
		lastRelease time.Time  // when it started to release
		handoffs    int
		cutOff      int // waits cut off by the end of the turn
		latencies   []time.Duration
		counts      = make([]int, n)

		waits = make([][]time.Duration, n)
		wg    sync.WaitGroup
		errs  = make(chan error, n)
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := t.clients[g%len(t.clients)]
			for runCtx.Err() == nil {
				asked := time.Now()
				release, err := cl.Acquire(runCtx, t.key)
				switch {
				case errors.Is(err, ErrGaveUp):
					if runCtx.Err() == nil {
						gaveUp.Add(1)
					}
					continue
				case err != nil && runCtx.Err() != nil:
					// Cut off by the end of the turn: it had waited at
					// least this long, a lower bound that keeps long
					// waits in the percentile.
					cut := time.Since(asked)
					mu.Lock()
					waits[g] = append(waits[g], cut)
					cutOff++
					mu.Unlock()
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
				if t.holdFor > 0 {
					time.Sleep(t.holdFor) // the holder's work
				}
				// Acquisitions that end after the turn (zk.Lock cannot be
				// cancelled, so its waiters hold once more) count only
				// as waits.
				mu.Lock()
				waits[g] = append(waits[g], held.Sub(asked))
				if runCtx.Err() == nil {
					counts[g]++
					if last != g && last != -1 {
						handoffs++
						latencies = append(latencies, held.Sub(lastRelease))
					}
					last = g
					lastRelease = time.Now()
				}
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
	sleepCtx(runCtx, d)
	took := time.Since(begin)
	cancel()
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return err
	}
	// Violations count even in warm-up: they must never happen.
	t.violations += violations.Load()
	if record {
		t.took += took
		t.handoffs += handoffs
		t.cutOff += cutOff
		t.gaveUp += gaveUp.Load()
		t.latencies = append(t.latencies, latencies...)
		for g := range n {
			t.counts[g] += counts[g]
			t.waits = append(t.waits, waits[g]...)
		}
	}
	return nil
}

func (t *contended) report(r *Results, c *Contestant, rep int) {
	total, least := 0, t.counts[0]
	for _, k := range t.counts {
		total += k
		least = min(least, k)
	}
	r.set(c, Violations, rep, float64(t.violations))
	r.set(c, GaveUp, rep, float64(t.gaveUp))
	r.set(c, Handoffs, rep, float64(t.handoffs)/t.took.Seconds())
	if total > 0 {
		r.set(c, MinShare, rep, float64(least)/(float64(total)/float64(len(t.counts))))
	}
	if len(t.latencies) > 0 {
		r.set(c, HandoffP50, rep, micros(Percentile(t.latencies, 50)))
		r.set(c, HandoffP99, rep, micros(Percentile(t.latencies, 99)))
	}
	if len(t.waits) > 0 {
		r.set(c, WaitP99, rep, float64(Percentile(t.waits, 99))/float64(time.Millisecond))
		r.set(c, CutOff, rep, 100*float64(t.cutOff)/float64(len(t.waits)))
	}
}

func (t *contended) close() { t.closeFn() }

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
