package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// runDistinct has Config.Goroutines goroutines over two clients each take and
// give back a key of its own, and reports acquire+release operations per
// second: the throughput when locks do not contend.
func runDistinct(ctx context.Context, r *Results, c *Contestant, rep int) error {
	clients, closeAll, err := openClients(ctx, c, 2, 0)
	if err != nil {
		return err
	}
	defer closeAll()
	base := runKey(Distinct)
	var (
		ops      atomic.Int64
		counting atomic.Bool
		wg       sync.WaitGroup
		errs     = make(chan error, r.Config.Goroutines)
	)
	stop := make(chan struct{})
	for g := range r.Config.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, key := clients[g%len(clients)], fmt.Sprintf("%s/%d", base, g)
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
				if counting.Load() {
					ops.Add(1)
				}
			}
		}()
	}
	time.Sleep(r.Config.Warmup) // unmeasured: connections open, caches warm
	counting.Store(true)
	begin := time.Now()
	time.Sleep(r.Config.Window)
	counting.Store(false)
	took := time.Since(begin)
	close(stop)
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return err
	}
	r.set(c, DistinctOps, rep, float64(ops.Load())/took.Seconds())
	return nil
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
