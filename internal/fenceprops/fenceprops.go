// Package fenceprops holds the properties every fence (every Checker and every
// fenced write) must have, for the tests of each: the root module's Memory and
// HTTP handler, the SQL fence on each database, and the drivers' fenced writes.
// It returns errors rather than failing a test, so that its own tests can show
// it failing on broken fences.
package fenceprops

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/distlock/lock/fence"
)

// Store is a resource guarded by a fence.
type Store struct {
	// Write admits token through the fence and, only if it is admitted,
	// stores value, atomically with the admission. It returns an error
	// matching fence.ErrStale when the token is refused; any other error
	// fails the property.
	Write func(ctx context.Context, token uint64, value string) error
	// Read returns the stored value ("" if none).
	Read func(ctx context.Context) (string, error)
}

// ValueOf is the value ConcurrentWriters's writer with token writes.
func ValueOf(token uint64) string { return "written-by-" + strconv.FormatUint(token, 10) }

// ConcurrentWriters runs writers writers at once, each writing twice with its
// own token (tokens 1..writers, started in a shuffled order, so admissions
// interleave), and checks the outcome: the largest token's writes were both
// admitted, the stored value is its value, and every refused write was
// refused after a write with a larger token had begun (it was older than an
// admitted one). It returns nil when all holds.
func ConcurrentWriters(ctx context.Context, s Store, writers int) error {
	if writers < 2 {
		return fmt.Errorf("fenceprops: %d writers; want at least 2", writers)
	}
	type outcome struct {
		token    uint64
		admitted bool
		err      error
		returned int64 // the clock when Write returned
	}
	var (
		clock   atomic.Int64
		started = make([]atomic.Int64, writers+1) // by token: the clock when its first write began; 0 before
		mu      sync.Mutex
		results []outcome
		wg      sync.WaitGroup
		begin   = make(chan struct{})
	)
	for _, i := range rand.Perm(writers) {
		token := uint64(i + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			for range 2 {
				started[token].CompareAndSwap(0, clock.Add(1))
				err := s.Write(ctx, token, ValueOf(token))
				o := outcome{token: token, admitted: err == nil, returned: clock.Add(1)}
				if err != nil && !errors.Is(err, fence.ErrStale) {
					o.err = err
				}
				mu.Lock()
				results = append(results, o)
				mu.Unlock()
			}
		}()
	}
	close(begin)
	wg.Wait()

	top := uint64(writers)
	var errs []error
	for _, o := range results {
		switch {
		case o.err != nil:
			errs = append(errs, fmt.Errorf("token %d: write failed: %w", o.token, o.err))
		case o.token == top && !o.admitted:
			errs = append(errs, fmt.Errorf("token %d, the largest, was refused", o.token))
		case !o.admitted:
			newer := false
			for u := o.token + 1; u <= top; u++ {
				if s := started[u].Load(); s != 0 && s < o.returned {
					newer = true
					break
				}
			}
			if !newer {
				errs = append(errs, fmt.Errorf("token %d was refused before any larger token's write began", o.token))
			}
		}
	}
	got, err := s.Read(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("read: %w", err))
	} else if want := ValueOf(top); got != want {
		errs = append(errs, fmt.Errorf("stored value %q, want %q (the largest token's)", got, want))
	}
	return errors.Join(errs...)
}
