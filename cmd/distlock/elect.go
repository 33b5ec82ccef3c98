package main

import (
	"context"
	"errors"

	"github.com/distlock/lock"
)

// lead is "distlock elect": campaign, run the command while leading, and after
// a loss (the command stopped as run stops it) campaign again, unless --once.
// A command that ends by itself ends distlock with its status.
func (r *runner) lead() int {
	for {
		ld, status := r.campaign()
		if ld == nil {
			return status
		}
		status = r.runHolding(leading{ld}, r.env(ld.Token))
		if status != exitLost || r.cfg.once {
			return status
		}
		r.verbosef("campaigning again for %q", r.cfg.key)
	}
}

// campaign waits until distlock leads, or returns nil and the exit status.
func (r *runner) campaign() (*lock.Leadership, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := []lock.AcquireOption{lock.WithTTL(r.ttl)}
	if r.expiring {
		opts = append(opts, lock.WithGrace(r.grace)) // as for run: see acquire
	}
	type result struct {
		ld  *lock.Leadership
		err error
	}
	done := make(chan result, 1)
	r.verbosef("campaigning for %q on %s", r.cfg.key, r.locker)
	go func() {
		ld, err := r.locker.Campaign(ctx, r.cfg.key, r.cfg.value, opts...)
		done <- result{ld, err}
	}()
	var res result
	select {
	case res = <-done:
	case s := <-r.sigs:
		cancel()
		if res = <-done; res.err == nil {
			r.release(leading{res.ld})
		}
		r.errorf("%v while campaigning for %q", s, r.cfg.key)
		return nil, exitSignalBase + signum(s)
	}
	switch err := res.err; {
	case err == nil:
		return res.ld, 0
	case errors.Is(err, lock.ErrInvalidKey), errors.Is(err, lock.ErrInvalidArgument), errors.Is(err, lock.ErrUnsupported):
		return nil, usageError(r.stderr, "distlock", "%v", err)
	default:
		r.errorf("%v", err)
		return nil, exitUnavailable
	}
}
