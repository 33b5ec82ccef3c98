package run

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/memdriver"
	"github.com/distlock/lock/soak/check"
)

func quick(name string, nd func() (driver.Driver, error), seed int64, out string) InProcess {
	return InProcess{Name: name, NewDriver: nd, Clients: 8, Keys: 2, TTL: 200 * time.Millisecond,
		Duration: 5 * time.Second, Seed: seed, Out: out}
}

// brokenRounds is how many quick soaks (of different seeds) a broken driver
// may take to be caught: a flaw shows only when the nemesis's fault meets an
// operation it breaks, and a loaded machine runs fewer operations a round.
const brokenRounds = 3

// The checker must be able to fail: every deliberately broken driver is
// caught within brokenRounds quick soaks.
func TestSoakReportsEveryBrokenDriver(t *testing.T) {
	for _, c := range []struct {
		name string
		flaw flaw
	}{
		{"release-without-owner-check", flawNoOwnerCheck},
		{"refresh-ignores-loss", flawRefreshIgnoresLoss},
		{"repeated-token", flawRepeatToken},
		{"grant-after-validity", flawLateGrant},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for round := range brokenRounds {
				s := newBrokenStore(c.flaw)
				q := quick(c.name, s.driver, int64(1+round), t.TempDir())
				q.Forget = s.forget
				sum, err := q.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if len(sum.Violations) > 0 {
					t.Logf("round %d: %d violations (first: %s) in %v", round+1, len(sum.Violations), sum.Violations[0].Property, sum.Ops)
					return
				}
				t.Logf("round %d: no violation found in %v ops, %v faults", round+1, sum.Ops, sum.Faults)
			}
			t.Fatalf("no violation found in %d quick soaks", brokenRounds)
		})
	}
}

func TestSoakOfCorrectDriversFindsNoViolation(t *testing.T) {
	control := newBrokenStore(flawNone)
	for _, c := range []struct {
		name   string
		nd     func() (driver.Driver, error)
		forget func()
	}{
		{"control", control.driver, control.forget},
		{"mem", func() (driver.Driver, error) { return memdriver.New("soak-selftest"), nil }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := quick(c.name, c.nd, 1, t.TempDir())
			q.Forget = c.forget
			sum, err := q.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if sum.Ops["write"] == 0 || len(sum.Faults) == 0 {
				t.Fatalf("the soak did nothing: %v ops, %v faults", sum.Ops, sum.Faults)
			}
			for _, v := range sum.Violations {
				t.Errorf("violation: %s", v)
			}
			t.Logf("%v ops, %v faults, loss detection %v", sum.Ops, sum.Faults, sum.LossDetectionMS)
		})
	}
}

// strictFence refuses a token not above the largest admitted: the
// "WHERE fence < $tok" rule, which refuses a holder's second operation.
func strictFence() guard {
	var mu sync.Mutex
	highest := map[string]uint64{}
	return func(_ context.Context, resource string, token uint64, write func() error) error {
		mu.Lock()
		defer mu.Unlock()
		if token <= highest[resource] {
			return &fence.StaleError{Resource: resource, Token: token}
		}
		highest[resource] = token
		return write()
	}
}

// noFence admits every token.
func noFence() guard {
	return func(_ context.Context, _ string, _ uint64, write func() error) error { return write() }
}

// resourceViolations are the violations of the resource's properties, not
// of the locks'.
func resourceViolations(sum *Summary) []check.Violation {
	var vs []check.Violation
	for _, v := range sum.Violations {
		if v.Property == "linearizable" || v.Property == "no stale write" {
			vs = append(vs, v)
		}
	}
	return vs
}

// The linearizability check covers the fence: under a driver whose refresh
// ignores the loss (stale holders keep writing), a resource with a broken
// fence is caught within brokenRounds quick soaks by a property of the
// resource, and package fence's Memory, the soak's own, keeps the resource
// linearizable under the same driver.
func TestSoakReportsEveryBrokenFence(t *testing.T) {
	for _, c := range []struct {
		name  string
		guard func() guard
		ok    bool
	}{
		{"fence.Memory", func() guard { return fence.NewMemory().Guard }, true},
		{"refuses-the-holders-own-token", strictFence, false},
		{"admits-stale-tokens", noFence, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for round := range brokenRounds {
				s := newBrokenStore(flawRefreshIgnoresLoss)
				q := quick(c.name, s.driver, int64(1+round), t.TempDir())
				q.Forget = s.forget
				q.resource = newResourceGuardedBy(c.guard())
				// Every holder on one register, for long enough that a stale
				// holder's write meets a newer holder's read often (a few
				// times a run): it shows only then.
				q.Keys, q.Duration = 1, 10*time.Second
				sum, err := q.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				vs := resourceViolations(sum)
				if c.ok {
					for _, v := range vs {
						t.Errorf("round %d: %s", round+1, v)
					}
					if sum.Ops["write"] > 0 && len(sum.Violations) > 0 {
						t.Logf("round %d: %d violations of the locks, none of the resource, in %v", round+1, len(sum.Violations), sum.Ops)
						return
					}
					// On a loaded machine a round can end before a stale
					// holder wrote: it proved nothing, so another one runs.
					t.Logf("round %d: the stale holders did not show (%v ops, %d violations of the locks)", round+1, sum.Ops, len(sum.Violations))
					continue
				}
				if len(vs) > 0 {
					t.Logf("round %d: %d violations of the resource (first: %s) in %v", round+1, len(vs), vs[0].Property, sum.Ops)
					return
				}
				t.Logf("round %d: no violation of the resource found in %v ops, %v faults", round+1, sum.Ops, sum.Faults)
			}
			if c.ok {
				t.Fatalf("the stale holders did not show in %d quick soaks: fence.Memory was never put to the test", brokenRounds)
			}
			t.Fatalf("no violation of the resource found in %d quick soaks", brokenRounds)
		})
	}
}
