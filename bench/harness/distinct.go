package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// distinct has Config.Goroutines (or, for the wide run, WideGoroutines)
// goroutines over two clients each take and give back a key of its own, and
// reports acquire+release operations per second: the throughput when locks do
// not contend.
type distinct struct {
	clients    []Client
	base       string
	goroutines int
	metric     Metric // DistinctOps or DistinctWide
	ops        int64
	took       time.Duration
	closeFn    func()
}

func openDistinct(ctx context.Context, cfg Config, c *Contestant) (trial, error) {
	return newDistinct(ctx, c, cfg.Goroutines, DistinctOps)
}

func openDistinctWide(ctx context.Context, cfg Config, c *Contestant) (trial, error) {
	return newDistinct(ctx, c, cfg.WideGoroutines, DistinctWide)
}

func newDistinct(ctx context.Context, c *Contestant, goroutines int, m Metric) (trial, error) {
	clients, closeAll, err := openClients(ctx, c, 2, 0)
	if err != nil {
		return nil, err
	}
	return &distinct{clients: clients, base: runKey(Distinct), goroutines: goroutines, metric: m, closeFn: closeAll}, nil
}

func (t *distinct) run(ctx context.Context, d time.Duration, record bool) error {
	var (
		ops  atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, t.goroutines)
	)
	stop := make(chan struct{})
	begin := time.Now()
	for g := range t.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, key := t.clients[g%len(t.clients)], fmt.Sprintf("%s/%d", t.base, g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				release, err := cl.Acquire(ctx, key)
				if err == nil {
					err = release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				ops.Add(1)
			}
		}()
	}
	sleepCtx(ctx, d)
	close(stop)
	wg.Wait()
	took := time.Since(begin)
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return err
	}
	if record {
		t.ops += ops.Load()
		t.took += took
	}
	return nil
}

func (t *distinct) report(r *Results, c *Contestant, rep int) {
	r.set(c, t.metric, rep, float64(t.ops)/t.took.Seconds())
}

func (t *distinct) close() { t.closeFn() }

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
