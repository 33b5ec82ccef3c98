package fenceprops

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// memStore is a value guarded by fence.Memory, or, when admitAll, by nothing.
type memStore struct {
	m        *fence.Memory
	mu       sync.Mutex
	value    string
	admitAll bool
	noneOK   bool
	deletes  bool
	// refusedBy: what the store's refusals say refused them.
	refusedBy func(a Attempt) uint64
}

type refusal struct {
	fence.StaleError
	by uint64
}

func (s *memStore) store() Store {
	st := Store{
		Write: func(ctx context.Context, a Attempt) error {
			set := func() error {
				s.mu.Lock()
				defer s.mu.Unlock()
				if a.Delete {
					s.value = ""
				} else {
					s.value = a.Value
				}
				return nil
			}
			var err error
			switch {
			case s.noneOK:
				err = &fence.StaleError{Resource: "r", Token: a.Token}
			case s.admitAll:
				err = set()
			default:
				err = s.m.Guard(ctx, "r", a.Token, set)
			}
			if errors.Is(err, fence.ErrStale) && s.refusedBy != nil {
				return &refusal{fence.StaleError{Resource: "r", Token: a.Token}, s.refusedBy(a)}
			}
			return err
		},
		Read:    func(context.Context) (string, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.value, nil },
		Deletes: s.deletes,
	}
	if s.refusedBy != nil {
		st.RefusedBy = func(err error) (uint64, bool) {
			var r *refusal
			if errors.As(err, &r) {
				return r.by, true
			}
			return 0, false
		}
	}
	return st
}

func TestConcurrentWritersHoldsForMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, deletes := range []bool{false, true} {
		for range 20 {
			s := &memStore{m: fence.NewMemory(), deletes: deletes}
			final, err := ConcurrentWriters(ctx, s.store(), 16, 16)
			if err != nil {
				t.Fatal(err)
			}
			if !final.Final || final.Token != 16 || final.Delete != deletes {
				t.Fatalf("final attempt %+v; want the Final one, of token 16, a deletion %v", final, deletes)
			}
		}
	}
}

// Where the store says which token refused a write, that token is checked: a
// correct Memory's largest admitted passes, a refusal claiming the write's
// own token fails.
func TestConcurrentWritersChecksTheTokenThatRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := fence.NewMemory()
	s := &memStore{m: m, refusedBy: func(Attempt) uint64 { return m.Highest("r") }}
	if _, err := ConcurrentWriters(ctx, s.store(), 8, 30); err != nil {
		t.Fatal(err)
	}
	s = &memStore{m: fence.NewMemory(), refusedBy: func(a Attempt) uint64 { return a.Token }}
	if _, err := ConcurrentWriters(ctx, s.store(), 8, 30); err == nil {
		t.Fatal("refusals naming the refused write's own token passed")
	}
}

// The property can fail: a fence that refuses everything, and a store with no
// fence at all whose last writer is, in one of many runs, not the largest token.
func TestConcurrentWritersFailsOnBrokenFences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ConcurrentWriters(ctx, (&memStore{noneOK: true}).store(), 4, 4); err == nil {
		t.Fatal("a fence that refuses every token passed")
	}
	for i := 0; ; i++ {
		if _, err := ConcurrentWriters(ctx, (&memStore{admitAll: true}).store(), 16, 16); err != nil {
			break
		}
		if ctx.Err() != nil || i > 10000 {
			t.Fatal("an unfenced store passed every run")
		}
	}
}

func TestConcurrentWritersRefusesTooFewWritersOrTokens(t *testing.T) {
	s := (&memStore{m: fence.NewMemory()}).store()
	for _, c := range [][2]int{{1, 8}, {8, 1}} {
		if _, err := ConcurrentWriters(context.Background(), s, c[0], c[1]); err == nil {
			t.Errorf("%d writers, %d tokens: no error", c[0], c[1])
		}
	}
}
