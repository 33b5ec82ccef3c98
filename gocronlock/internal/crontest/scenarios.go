package crontest

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Interval is the job's interval in the scenarios. A tick's number is the
// nearest due time, so an instance may run up to half of it late before its
// runs are counted on the wrong tick.
const Interval = 500 * time.Millisecond

// WakeUp bounds how long, after a dead leader's lock is freed, the
// follower's campaign takes to win it and its scheduler to act on a due time
// (a backend's notification or poll, timers on a busy host).
const WakeUp = 500 * time.Millisecond

// Ticks is how many due times, with both instances running, a scenario
// counts.
const Ticks = 10

// LockerRunsEachTickOnce runs two instances of a job on url with gocronlock's
// Locker and WithMinHold(Interval/2), the second instance's ticks offset
// late by offset (as another host's clock or timer would be), and checks
// that each of Ticks due times ran exactly once across both, and that the
// other instance was refused the lock for it (lock.ErrLocked) rather than
// not asking.
func LockerRunsEachTickOnce(t *testing.T, url string, offset time.Duration) {
	out := filepath.Join(t.TempDir(), "runs")
	cfg := Config{URL: url, Mode: "locker", Out: out, Epoch: time.Now(), Interval: Interval, MinHold: Interval / 2, TTL: 5 * time.Second, Job: "tick-job"}
	a := Start(t, cfg)
	cfg.Offset = offset
	b := Start(t, cfg)
	WaitFor(t, out, Watchdog, fmt.Sprintf("%d ticks with both instances running", Ticks), func(evs []Event) bool {
		first := ReadyTick(evs, a, b)
		return first >= 0 && seen(evs, first+Ticks+1)
	})
	a.Stop(t)
	b.Stop(t)
	evs := ReadEvents(t, out)
	first := ReadyTick(evs, a, b)
	runs, skips := Count(evs, "run"), Count(evs, "skip")
	perPid := map[int]int{}
	for _, e := range evs {
		if e.Kind == "run" && e.Tick >= first && e.Tick < first+Ticks {
			perPid[e.Pid]++
		}
		if e.Kind == "error" {
			t.Errorf("a Lock failed other than with ErrLocked: tick %d pid %d: %s", e.Tick, e.Pid, e.Detail)
		}
	}
	for k := first; k < first+Ticks; k++ {
		if runs[k] != 1 || skips[k] != 1 {
			t.Errorf("tick %d: %d runs and %d skips, want 1 run and 1 skip", k, runs[k], skips[k])
		}
	}
	if t.Failed() {
		t.Logf("events:\n%s", Format(evs))
	}
	t.Logf("ticks %d..%d: runs by instance %v (a=%d, b=%d, b's offset %v)", first, first+Ticks-1, perPid, a.Pid(), b.Pid(), offset)
}

// LockerWithoutMinHoldRunsOffsetTicksTwice is the problem WithMinHold
// solves, shown: with the lock held only while the (short) job runs, an
// instance whose ticks come offset later than the job takes finds the lock
// free and runs the same due time again.
func LockerWithoutMinHoldRunsOffsetTicksTwice(t *testing.T, url string, offset time.Duration) {
	out := filepath.Join(t.TempDir(), "runs")
	cfg := Config{URL: url, Mode: "locker", Out: out, Epoch: time.Now(), Interval: Interval, TTL: 5 * time.Second, Job: "tick-job"}
	a := Start(t, cfg)
	cfg.Offset = offset
	b := Start(t, cfg)
	WaitFor(t, out, Watchdog, fmt.Sprintf("%d ticks with both instances running", Ticks), func(evs []Event) bool {
		first := ReadyTick(evs, a, b)
		return first >= 0 && seen(evs, first+Ticks+1)
	})
	a.Stop(t)
	b.Stop(t)
	evs := ReadEvents(t, out)
	first := ReadyTick(evs, a, b)
	runs := Count(evs, "run")
	twice := 0
	for k := first; k < first+Ticks; k++ {
		if runs[k] > 1 {
			twice++
		}
	}
	if twice == 0 {
		t.Errorf("no tick of %d ran twice without a minimum hold; events:\n%s", Ticks, Format(evs))
	}
	t.Logf("without WithMinHold, %d of %d ticks ran on both instances (offset %v)", twice, Ticks, offset)
}

// ElectorFailsOver runs two instances with gocronlock's Elector on url:
// only the leader runs the job, one run per tick; after the leader is
// killed (SIGKILL) the other leads and runs within ttl, an interval and
// WakeUp, or, on a session backend (session: the dead leader's lock is freed
// when its process dies), within an interval and WakeUp.
// It returns the failover time: from the kill to the new leader's first run.
func ElectorFailsOver(t *testing.T, url string, ttl time.Duration, session bool) time.Duration {
	out := filepath.Join(t.TempDir(), "runs")
	cfg := Config{URL: url, Mode: "elector", Out: out, Epoch: time.Now(), Interval: Interval, TTL: ttl, Job: "elect-" + filepath.Base(t.TempDir())}
	a := Start(t, cfg)
	b := Start(t, cfg)
	procs := map[int]*Proc{a.Pid(): a, b.Pid(): b}
	var first int64
	evs := WaitFor(t, out, Watchdog, fmt.Sprintf("%d runs with both instances running", Ticks/2), func(evs []Event) bool {
		first = ReadyTick(evs, a, b)
		return first >= 0 && len(runsFrom(evs, first)) >= Ticks/2
	})
	runs := runsFrom(evs, first)
	leader := procs[runs[0].Pid]
	for _, e := range runs {
		if e.Pid != leader.Pid() {
			t.Fatalf("both instances ran the job while both were up:\n%s", Format(evs))
		}
	}
	follower := a
	if leader == a {
		follower = b
	}
	killed := time.Now()
	leader.Kill(t)
	evs = WaitFor(t, out, ttl+Watchdog, "a run by the follower after the leader was killed", func(evs []Event) bool {
		return slices.ContainsFunc(evs, func(e Event) bool { return e.Kind == "run" && e.Pid == follower.Pid() })
	})
	i := slices.IndexFunc(evs, func(e Event) bool { return e.Kind == "run" && e.Pid == follower.Pid() })
	failover := evs[i].At.Sub(killed)
	// Leadership passes when the dead leader's lock is freed (at its death on
	// a session backend, at most a TTL after it on an expiring one: the lock
	// was refreshed before the kill), and the new leader runs at its next tick
	// after that; WakeUp allows for the follower's campaign to learn the lock
	// is free and for the tick's timer.
	freed, limit := "the TTL", ttl+Interval+WakeUp
	if session {
		freed, limit = "at once", Interval+WakeUp
	}
	if failover > limit {
		t.Errorf("the follower first ran %v after the leader was killed, want within %v (lock freed %s, then the next tick, and %v to wake up)", failover, limit, freed, WakeUp)
	}
	WaitFor(t, out, Watchdog, "three runs by the new leader", func(evs []Event) bool {
		return len(slices.DeleteFunc(runsFrom(evs, 0), func(e Event) bool { return e.Pid != follower.Pid() })) >= 3
	})
	follower.Stop(t)
	evs = ReadEvents(t, out)
	for k, n := range Count(evs, "run") {
		if n > 1 {
			t.Errorf("tick %d ran %d times", k, n)
		}
	}
	for _, e := range evs {
		if e.Pid == leader.Pid() && e.At.After(killed) {
			t.Errorf("the killed leader ran after its death: %+v", e)
		}
	}
	if t.Failed() {
		t.Logf("events:\n%s", Format(evs))
	}
	t.Logf("leader %d killed; follower %d ran %v later (TTL %v, interval %v)", leader.Pid(), follower.Pid(), failover.Round(time.Millisecond), ttl, Interval)
	return failover
}

// seen: the file has an event of tick k or later.
func seen(evs []Event, k int64) bool {
	return slices.ContainsFunc(evs, func(e Event) bool { return (e.Kind == "run" || e.Kind == "skip") && e.Tick >= k })
}

// runsFrom returns the runs of tick first and later.
func runsFrom(evs []Event, first int64) []Event {
	var runs []Event
	for _, e := range evs {
		if e.Kind == "run" && e.Tick >= first {
			runs = append(runs, e)
		}
	}
	return runs
}
