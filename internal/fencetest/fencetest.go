// Package fencetest checks a fenced write under concurrency: many writers
// with interleaved tokens write one resource at once, and the outcomes must
// be those of a resource that admits a token at least as large as every one
// admitted before it, atomically with the write.
package fencetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/fence"
)

// Attempt is one write of Interleave.
type Attempt struct {
	Token uint64
	N     int  // distinct per attempt: the value may carry it
	Final bool // the one attempt with the largest token: the resource ends in its state
}

// Write makes the fenced write of a. A refusal is an error matching
// fence.ErrStale, with the token that refused it (the resource's largest at
// that moment).
type Write func(ctx context.Context, a Attempt) (refusedBy uint64, err error)

type outcome struct {
	a          Attempt
	admitted   bool
	refusedBy  uint64
	start, end time.Time
}

// Interleave runs writers goroutines that make the writes of tokens 1 to
// tokens, perToken writes each (and one of the largest, the Final one), in
// an order whose tokens mostly rise but go back by up to a few tokens, as
// holders that overlap would write. It fails t unless:
//
//   - every write was admitted or refused with fence.ErrStale;
//   - every refused write was refused by a larger token, admitted by a write
//     that began before the refusal returned;
//   - a write that began after an admitted write had returned was not
//     admitted with a smaller token (admissions follow the tokens in time);
//   - the Final write was admitted;
//   - some writes were refused (else the test tested nothing).
//
// The caller then checks that the resource is in the Final write's state.
func Interleave(t testing.TB, ctx context.Context, writers, tokens, perToken int, write Write) Attempt {
	t.Helper()
	var order []Attempt
	n := 0
	for tok := 1; tok < tokens; tok++ {
		for range perToken {
			order = append(order, Attempt{Token: uint64(tok), N: n})
			n++
		}
	}
	final := Attempt{Token: uint64(tokens), N: n, Final: true}
	// Sort by token plus a jitter of up to 4 tokens: each write may come
	// after writes of up to 4 larger tokens.
	keys := make([]float64, len(order))
	for i, a := range order {
		keys[i] = float64(a.Token) + 4*rand.Float64()
	}
	for i := 1; i < len(order); i++ { // insertion sort by key
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	order = append(order, final)

	feed := make(chan Attempt)
	results := make(chan outcome, len(order))
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range feed {
				o := outcome{a: a, start: time.Now()}
				by, err := write(ctx, a)
				o.end = time.Now()
				switch {
				case err == nil:
					o.admitted = true
				case errors.Is(err, fence.ErrStale):
					o.refusedBy = by
				default:
					t.Errorf("write %d (token %d): %v", a.N, a.Token, err)
				}
				results <- o
			}
		}()
	}
	for _, a := range order {
		feed <- a
	}
	close(feed)
	wg.Wait()
	close(results)

	var all, admitted []outcome
	for o := range results {
		all = append(all, o)
		if o.admitted {
			admitted = append(admitted, o)
		}
	}
	refused := 0
	for _, o := range all {
		if o.a.Final && !o.admitted {
			t.Errorf("the write of the largest token %d was refused by %d", o.a.Token, o.refusedBy)
		}
		if o.admitted {
			for _, b := range admitted {
				if b.end.Before(o.start) && b.a.Token > o.a.Token {
					t.Errorf("write %d admitted with token %d after write %d with token %d had been admitted", o.a.N, o.a.Token, b.a.N, b.a.Token)
				}
			}
			continue
		}
		refused++
		if o.refusedBy <= o.a.Token {
			t.Errorf("write %d with token %d refused by token %d, not a larger one", o.a.N, o.a.Token, o.refusedBy)
			continue
		}
		found := false
		for _, b := range admitted {
			if b.a.Token == o.refusedBy && b.start.Before(o.end) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("write %d with token %d refused by token %d, which no write admitted before the refusal", o.a.N, o.a.Token, o.refusedBy)
		}
	}
	if refused == 0 {
		t.Errorf("none of %d interleaved writes was refused: the test did not interleave", len(all))
	}
	t.Logf("%d writes by %d writers: %d admitted, %d refused", len(all), writers, len(all)-refused, refused)
	return final
}
