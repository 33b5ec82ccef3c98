package harness

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// runHeld has one client hold Config.HeldLocks locks at once and reports the
// heap and goroutines each held lock costs in this process, the client's
// connections to the server, and the requests per second the server handles
// while the locks are only held: the refresh traffic (leases or sessions kept
// alive), measured over Config.HeldWindow after a third of the TTL has passed.
// Libraries without automatic refresh take their locks with a TTL longer than
// the scenario and report no refresh traffic.
func runHeld(ctx context.Context, r *Results, c *Contestant, rep int) error {
	cfg := r.Config
	ttl := cfg.HeldTTL
	if !c.Refreshes {
		ttl = 10 * (cfg.HeldTTL + cfg.HeldWindow)
	}
	before, err := measureBefore(c.Server.Ports)
	if err != nil {
		return err
	}
	clients, closeAll, err := openClients(ctx, c, 1, ttl)
	if err != nil {
		return err
	}
	defer closeAll()
	releases, _, err := holdMany(ctx, clients[0], runKey(Held), cfg.HeldLocks, false)
	defer func() {
		_ = releaseAll(context.WithoutCancel(ctx), releases)
	}()
	if err != nil {
		return err
	}
	if err := before.report(r, c, rep, cfg.HeldLocks, HeldBytes, HeldGorout, HeldConns); err != nil {
		return err
	}
	if c.Refreshes && c.Server.Requests != nil {
		sleepCtx(ctx, cfg.HeldTTL/3)
		rate, err := serverRate(ctx, c.Server, cfg.HeldWindow)
		if err != nil {
			return err
		}
		r.set(c, HeldReqs, rep, rate)
	}
	return nil
}

// footprint is this process's heap, goroutines and connections to a server
// before a client takes its locks.
type footprint struct {
	heap       uint64
	goroutines int
	conns      int
	ports      []int
}

func measureBefore(ports []int) (footprint, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f := footprint{heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine(), ports: ports}
	var err error
	f.conns, err = countConns(ports)
	return f, err
}

// report sets the heap growth and goroutines per lock of n locks held since
// f, and the connections opened since f.
func (f footprint) report(r *Results, c *Contestant, rep, n int, bytes, goroutines, conns Metric) error {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	now, err := countConns(f.ports)
	if err != nil {
		return err
	}
	per := float64(n)
	r.set(c, bytes, rep, (float64(ms.HeapAlloc)-float64(f.heap))/per)
	r.set(c, goroutines, rep, float64(runtime.NumGoroutine()-f.goroutines)/per)
	r.set(c, conns, rep, float64(now-f.conns))
	return nil
}

// serverRate returns the requests per second srv handles over d.
func serverRate(ctx context.Context, srv *Server, d time.Duration) (float64, error) {
	req0, err := srv.Requests(ctx)
	if err != nil {
		return 0, fmt.Errorf("server requests: %w", err)
	}
	begin := time.Now()
	sleepCtx(ctx, d)
	req1, err := srv.Requests(ctx)
	if err != nil {
		return 0, fmt.Errorf("server requests: %w", err)
	}
	// One request of the two counted reads is our own.
	return float64(req1-req0-1) / time.Since(begin).Seconds(), nil
}

// holdMany acquires n keys from 8 goroutines and returns their releases (nil
// entries for keys not taken) and, when watch is set and the client is a
// Watcher, how each lock tells its loss (else nil). Watching costs a
// Watcher's locks what their loss signal takes (distlock's Lost channel), so
// the held scenario, which counts no losses, holds its locks as plainly as
// every other contestant does.
func holdMany(ctx context.Context, cl Client, base string, n int, watch bool) ([]Release, []Loss, error) {
	const workers = 8
	releases := make([]Release, n)
	watcher, watched := cl.(Watcher)
	watched = watched && watch
	var lost []Loss
	if watched {
		lost = make([]Loss, n)
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < n; k += workers {
				var (
					rel Release
					err error
				)
				if watched {
					rel, lost[k], err = watcher.AcquireWatched(ctx, heldKey(base, k))
				} else {
					rel, err = cl.Acquire(ctx, heldKey(base, k))
				}
				if err != nil {
					errs <- fmt.Errorf("hold lock %d: %w", k, err)
					return
				}
				releases[k] = rel
			}
		}()
	}
	wg.Wait()
	close(errs)
	return releases, lost, <-errs // the first error, if any: the others repeat it
}

// heldKey is the key of the k-th lock holdMany takes under base.
func heldKey(base string, k int) string { return fmt.Sprintf("%s/%d", base, k) }

func releaseAll(ctx context.Context, releases []Release) error {
	return errors.Join(releaseEach(ctx, releases)...)
}

// releaseEach releases every lock from 8 goroutines and returns each one's
// error (nil entries for locks released and for keys not taken).
func releaseEach(ctx context.Context, releases []Release) []error {
	const workers = 8
	errs := make([]error, len(releases))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < len(releases); k += workers {
				if releases[k] != nil {
					errs[k] = releases[k](ctx)
				}
			}
		}()
	}
	wg.Wait()
	return errs
}
