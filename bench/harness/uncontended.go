package harness

import (
	"context"
	"fmt"
	"time"
)

// runUncontended takes and gives back one free key from one goroutine, and
// reports the p50, p99 and mean of acquire+release.
func runUncontended(ctx context.Context, r *Results, c *Contestant, rep int) error {
	clients, closeAll, err := openClients(ctx, c, 1, 0)
	if err != nil {
		return err
	}
	defer closeAll()
	cl, key := clients[0], runKey(Uncontended)
	take := cl.Acquire
	if c.TryUncontended {
		take = cl.TryAcquire
	}
	var samples []time.Duration
	begin := time.Now()
	warmEnd, end := begin.Add(r.Config.Warmup), begin.Add(r.Config.Warmup+r.Config.Window)
	for t := begin; t.Before(end); {
		release, err := take(ctx, key)
		if err != nil {
			return fmt.Errorf("acquire a free key: %w", err)
		}
		if err := release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		now := time.Now()
		if t.After(warmEnd) {
			samples = append(samples, now.Sub(t))
		}
		t = now
	}
	r.set(c, UncMean, rep, micros(Mean(samples)))
	r.set(c, UncP50, rep, micros(Percentile(samples, 50)))
	r.set(c, UncP99, rep, micros(Percentile(samples, 99)))
	return nil
}
