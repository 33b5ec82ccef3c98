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
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	conns0, err := countConns(c.Server.Ports)
	if err != nil {
		return err
	}

	clients, closeAll, err := openClients(ctx, c, 1, ttl)
	if err != nil {
		return err
	}
	defer closeAll()
	releases, err := holdMany(ctx, clients[0], runKey(Held), cfg.HeldLocks)
	defer func() {
		_ = releaseAll(context.WithoutCancel(ctx), releases)
	}()
	if err != nil {
		return err
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	conns1, err := countConns(c.Server.Ports)
	if err != nil {
		return err
	}
	n := float64(cfg.HeldLocks)
	r.set(c, HeldBytes, rep, (float64(after.HeapAlloc)-float64(before.HeapAlloc))/n)
	r.set(c, HeldGorout, rep, float64(runtime.NumGoroutine()-goroutines)/n)
	r.set(c, HeldConns, rep, float64(conns1-conns0))

	if c.Refreshes && c.Server.Requests != nil {
		sleepCtx(ctx, cfg.HeldTTL/3)
		req0, err := c.Server.Requests(ctx)
		if err != nil {
			return fmt.Errorf("server requests: %w", err)
		}
		begin := time.Now()
		sleepCtx(ctx, cfg.HeldWindow)
		req1, err := c.Server.Requests(ctx)
		if err != nil {
			return fmt.Errorf("server requests: %w", err)
		}
		// One request of the two counted reads is our own.
		r.set(c, HeldReqs, rep, float64(req1-req0-1)/time.Since(begin).Seconds())
	}
	return nil
}

// holdMany acquires n keys from 8 goroutines and returns their releases (nil
// entries for keys not taken).
func holdMany(ctx context.Context, cl Client, base string, n int) ([]Release, error) {
	const workers = 8
	releases := make([]Release, n)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < n; k += workers {
				rel, err := cl.Acquire(ctx, fmt.Sprintf("%s/%d", base, k))
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
	return releases, <-errs // the first error, if any: the others repeat it
}

func releaseAll(ctx context.Context, releases []Release) error {
	const workers = 8
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < len(releases); k += workers {
				if releases[k] != nil {
					if err := releases[k](ctx); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}
