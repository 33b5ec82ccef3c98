package harness

import (
	"context"
	"fmt"
	"time"
)

// uncontended takes and gives back one free key from one goroutine, and
// reports the p50, p99 and mean of acquire+release.
type uncontended struct {
	cl      Client
	take    func(context.Context, string) (Release, error)
	key     string
	samples []time.Duration
	closeFn func()
}

func openUncontended(ctx context.Context, cfg Config, c *Contestant) (trial, error) {
	clients, closeAll, err := openClients(ctx, c, 1, 0)
	if err != nil {
		return nil, err
	}
	u := &uncontended{cl: clients[0], take: clients[0].Acquire, key: runKey(Uncontended), closeFn: closeAll}
	if c.TryUncontended {
		u.take = clients[0].TryAcquire
	}
	return u, nil
}

func (u *uncontended) run(ctx context.Context, d time.Duration, record bool) error {
	end := time.Now().Add(d)
	for t := time.Now(); t.Before(end); {
		release, err := u.take(ctx, u.key)
		if err != nil {
			return fmt.Errorf("acquire a free key: %w", err)
		}
		if err := release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		now := time.Now()
		if record {
			u.samples = append(u.samples, now.Sub(t))
		}
		t = now
	}
	return nil
}

func (u *uncontended) report(r *Results, c *Contestant, rep int) {
	r.set(c, UncMean, rep, micros(Mean(u.samples)))
	r.set(c, UncP50, rep, micros(Percentile(u.samples, 50)))
	r.set(c, UncP99, rep, micros(Percentile(u.samples, 99)))
}

func (u *uncontended) close() { u.closeFn() }
