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

// Attempt is one fenced write of ConcurrentWriters.
type Attempt struct {
	Token uint64
	N     int    // distinct per attempt
	Value string // what the write stores: distinct per attempt
	// Delete: the write deletes the value instead (only on a Store with
	// Deletes); Read then returns "".
	Delete bool
	// Final: the last write of the largest token. The resource ends in its
	// state.
	Final bool
}

// Store is a resource guarded by a fence.
type Store struct {
	// Write admits a.Token through the fence and, only if it is admitted,
	// stores a.Value (or deletes the value, for a.Delete), atomically with
	// the admission. It returns an error matching fence.ErrStale when the
	// token is refused; any other error fails the property.
	Write func(ctx context.Context, a Attempt) error
	// Read returns the stored value ("" if none).
	Read func(ctx context.Context) (string, error)
	// Deletes: the store can delete its value; every third attempt and the
	// final one are deletions.
	Deletes bool
	// RefusedBy, if set, returns the token that refused a write (the
	// resource's largest when it refused), from Write's error; ok false when
	// the error does not say. The property then checks that token too.
	RefusedBy func(err error) (token uint64, ok bool)
}

// ConcurrentWriters runs writers goroutines at once that make the writes of
// tokens 1 to tokens on one resource: each smaller token twice, in an order
// whose tokens mostly rise but go back by up to four tokens, as holders that
// overlap would write, and the largest token twice in a row by one writer
// (one holder writes many times with its one token), its second write the
// Final one. It returns the Final attempt, and an error unless:
//
//   - every write was admitted or refused with fence.ErrStale;
//   - both writes of the largest token were admitted;
//   - every refused write was refused after a write admitted with a larger
//     token had begun (it was older than an admitted one), and, where RefusedBy says
//     which token refused it, that token is larger and a write admitted with
//     it began before the refusal returned;
//   - no write that began after an admitted write had returned was admitted
//     with a smaller token (admissions follow the tokens in time);
//   - some writes were refused (else the property tested nothing);
//   - the stored value is the Final write's (none, for a deletion).
func ConcurrentWriters(ctx context.Context, s Store, writers, tokens int) (Attempt, error) {
	if writers < 2 || tokens < 2 {
		return Attempt{}, fmt.Errorf("fenceprops: %d writers, %d tokens; want at least 2 of each", writers, tokens)
	}
	attempt := func(token uint64, n int) Attempt {
		return Attempt{Token: token, N: n, Value: "written-by-" + strconv.FormatUint(token, 10) + "/" + strconv.Itoa(n),
			Delete: s.Deletes && n%3 == 2}
	}
	var order [][]Attempt // each item: the writes one writer makes in turn
	n := 0
	for tok := uint64(1); tok < uint64(tokens); tok++ {
		for range 2 {
			order = append(order, []Attempt{attempt(tok, n)})
			n++
		}
	}
	// Sort by token plus a jitter of up to 4 tokens: each write may come
	// after writes of up to 4 larger tokens.
	keys := make([]float64, len(order))
	for i, a := range order {
		keys[i] = float64(a[0].Token) + 4*rand.Float64()
	}
	for i := 1; i < len(order); i++ { // insertion sort by key
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	top := uint64(tokens)
	final := attempt(top, n+1)
	final.Final, final.Delete = true, s.Deletes
	order = append(order, []Attempt{attempt(top, n), final})

	type outcome struct {
		a          Attempt
		admitted   bool
		err        error
		refusedBy  uint64 // 0: not refused, or the error does not say
		start, end int64  // the clock when Write began and returned
	}
	var (
		clock   atomic.Int64 // orders the writers' events: they all tick it
		mu      sync.Mutex
		results []outcome
		wg      sync.WaitGroup
		feed    = make(chan []Attempt)
	)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for as := range feed {
				for _, a := range as {
					o := outcome{a: a, start: clock.Add(1)}
					err := s.Write(ctx, a)
					o.end = clock.Add(1)
					switch {
					case err == nil:
						o.admitted = true
					case errors.Is(err, fence.ErrStale):
						if s.RefusedBy != nil {
							o.refusedBy, _ = s.RefusedBy(err)
						}
					default:
						o.err = err
					}
					mu.Lock()
					results = append(results, o)
					mu.Unlock()
				}
			}
		}()
	}
	for _, as := range order {
		feed <- as
	}
	close(feed)
	wg.Wait()

	var admitted []outcome
	for _, o := range results {
		if o.admitted {
			admitted = append(admitted, o)
		}
	}
	var errs []error
	refused := 0
	for _, o := range results {
		switch {
		case o.err != nil:
			errs = append(errs, fmt.Errorf("write %d (token %d): %w", o.a.N, o.a.Token, o.err))
			continue
		case o.a.Token == top && !o.admitted:
			errs = append(errs, fmt.Errorf("write %d of token %d, the largest, was refused", o.a.N, o.a.Token))
			continue
		case o.admitted:
			for _, b := range admitted {
				if b.end < o.start && b.a.Token > o.a.Token {
					errs = append(errs, fmt.Errorf("write %d admitted with token %d after write %d with token %d had been admitted",
						o.a.N, o.a.Token, b.a.N, b.a.Token))
				}
			}
			continue
		}
		refused++
		newer := false
		for _, b := range admitted {
			if b.a.Token > o.a.Token && b.start < o.end {
				newer = true
				break
			}
		}
		if !newer {
			errs = append(errs, fmt.Errorf("write %d with token %d was refused before any write admitted with a larger token began",
				o.a.N, o.a.Token))
		}
		if o.refusedBy == 0 {
			continue
		}
		if o.refusedBy <= o.a.Token {
			errs = append(errs, fmt.Errorf("write %d with token %d refused by token %d, not a larger one", o.a.N, o.a.Token, o.refusedBy))
			continue
		}
		found := false
		for _, b := range admitted {
			if b.a.Token == o.refusedBy && b.start < o.end {
				found = true
				break
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("write %d with token %d refused by token %d, which no write admitted before the refusal",
				o.a.N, o.a.Token, o.refusedBy))
		}
	}
	if refused == 0 {
		errs = append(errs, fmt.Errorf("none of %d interleaved writes was refused: the writes did not interleave", len(results)))
	}
	want := final.Value
	if final.Delete {
		want = ""
	}
	got, err := s.Read(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("read: %w", err))
	} else if got != want {
		errs = append(errs, fmt.Errorf("stored value %q, want %q (the largest token's final write)", got, want))
	}
	return final, errors.Join(errs...)
}
