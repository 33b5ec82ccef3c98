package fenceprops

import (
	"context"
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
}

func (s *memStore) store() Store {
	return Store{
		Write: func(ctx context.Context, token uint64, value string) error {
			set := func() error { s.mu.Lock(); s.value = value; s.mu.Unlock(); return nil }
			switch {
			case s.noneOK:
				return &fence.StaleError{Resource: "r", Token: token}
			case s.admitAll:
				return set()
			}
			return s.m.Guard(ctx, "r", token, set)
		},
		Read: func(context.Context) (string, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.value, nil },
	}
}

func TestConcurrentWritersHoldsForMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 20 {
		s := &memStore{m: fence.NewMemory()}
		if err := ConcurrentWriters(ctx, s.store(), 16); err != nil {
			t.Fatal(err)
		}
	}
}

// The property can fail: a fence that refuses everything, and a store with no
// fence at all whose last writer is, in one of many runs, not the largest token.
func TestConcurrentWritersFailsOnBrokenFences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ConcurrentWriters(ctx, (&memStore{noneOK: true}).store(), 4); err == nil {
		t.Fatal("a fence that refuses every token passed")
	}
	for i := 0; ; i++ {
		if err := ConcurrentWriters(ctx, (&memStore{admitAll: true}).store(), 16); err != nil {
			break
		}
		if ctx.Err() != nil || i > 10000 {
			t.Fatal("an unfenced store passed every run")
		}
	}
}
