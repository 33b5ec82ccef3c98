package run

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
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
