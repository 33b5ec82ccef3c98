package harness

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// A trial is one contestant's run of a timed scenario within one repeat: its
// clients stay open while the contestants of a backend take turns in short
// slices, so that all of them meet the same load on a shared machine.
type trial interface {
	// run measures (or, with record false, only warms up) for d.
	run(ctx context.Context, d time.Duration, record bool) error
	// report sets the figures of what was recorded.
	report(r *Results, c *Contestant, rep int)
	close()
}

// newTrial opens the clients of a trial of s.
type newTrial func(ctx context.Context, cfg Config, c *Contestant) (trial, error)

// runGroup runs scenario s for the contestants of one backend: each warms up,
// then they take Config.Slices turns of Window/Slices each, in a fresh random
// order every round.
func (r *Results) runGroup(ctx context.Context, s Scenario, open newTrial, group []*Contestant, rep int) {
	type entry struct {
		c     *Contestant
		t     trial
		begin time.Time
		err   error
	}
	var entries []*entry
	for _, c := range group {
		if _, na := c.NA[s]; na || ctx.Err() != nil {
			continue
		}
		e := &entry{c: c, begin: time.Now()}
		e.t, e.err = open(ctx, r.Config, c)
		if e.err == nil {
			e.err = e.t.run(ctx, r.Config.Warmup, false)
		}
		entries = append(entries, e)
	}
	slices := max(r.Config.Slices, 1)
	slice := r.Config.Window / time.Duration(slices)
	for range slices {
		for _, i := range rand.Perm(len(entries)) {
			if e := entries[i]; e.err == nil && ctx.Err() == nil {
				e.err = e.t.run(ctx, slice, true)
			}
		}
	}
	for _, e := range entries {
		if errors.Is(e.err, ErrUnsupported) {
			// Not a failure: this library or driver has no such lock.
			if e.t != nil {
				e.t.close()
			}
			r.markNA(s, e.c, e.err)
			continue
		}
		if e.err == nil {
			e.t.report(r, e.c, rep)
		}
		if e.t != nil {
			e.t.close()
		}
		r.note(s, e.c, rep, time.Since(e.begin), e.err)
	}
}
