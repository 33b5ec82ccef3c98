package harness_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/bench/harness"
)

// fakeElection is an election in memory whose leader "process" is a
// goroutine-free stand-in: killing it frees the lead after expireAfter (the
// lease running out), or never when expireAfter is negative.
type fakeElection struct {
	expireAfter time.Duration
	sameTerm    bool // every leader gets the same term (a broken library)
	everyone    bool // every campaigner leads at once (a broken library)

	mu    sync.Mutex
	held  bool
	term  uint64
	freed chan struct{} // closed and replaced when the lead is freed
}

func newFakeElection() *fakeElection { return &fakeElection{term: 5, freed: make(chan struct{})} }

func (f *fakeElection) campaign(ctx context.Context) (uint64, func(context.Context) error, error) {
	for {
		f.mu.Lock()
		if !f.held || f.everyone {
			f.held = true
			if !f.sameTerm {
				f.term++
			}
			t := f.term
			f.mu.Unlock()
			return t, func(context.Context) error { f.free(); return nil }, nil
		}
		ch := f.freed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
}

func (f *fakeElection) free() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held {
		f.held = false
		close(f.freed)
		f.freed = make(chan struct{})
	}
}

type fakeCampaigner struct{ f *fakeElection }

func (c fakeCampaigner) Campaign(ctx context.Context, _ string) (uint64, func(context.Context) error, error) {
	return c.f.campaign(ctx)
}

func (fakeCampaigner) Close() error { return nil }

type fakeLeader struct {
	f    *fakeElection
	term uint64
}

func (l fakeLeader) Term() uint64 { return l.term }

func (l fakeLeader) Kill() error {
	if l.f.expireAfter >= 0 {
		time.AfterFunc(l.f.expireAfter, l.f.free)
	}
	return nil
}

// failoverRun runs the failover scenario once on f and returns the results
// and the contestant.
func failoverRun(t *testing.T, f *fakeElection, spawn bool) (*harness.Results, *harness.Contestant) {
	t.Helper()
	c := &harness.Contestant{Backend: "fake", Name: "fake election", Role: harness.Ours,
		Elector: &harness.Elector{TTL: 100 * time.Millisecond, Open: func(context.Context) (harness.Campaigner, error) {
			return fakeCampaigner{f}, nil
		}}}
	cfg := harness.Config{Only: []harness.Scenario{harness.Failover}, FailoverRepeats: 1, FailoverTimeout: time.Second}
	if spawn {
		cfg.SpawnLeader = func(ctx context.Context, _ *harness.Contestant, _ string) (harness.LeaderProc, error) {
			term, _, err := f.campaign(ctx)
			return fakeLeader{f, term}, err
		}
	}
	return harness.Run(context.Background(), cfg, []*harness.Contestant{c}), c
}

func noFigure(vals []float64) bool {
	for _, v := range vals {
		if !math.IsNaN(v) {
			return false
		}
	}
	return true
}

func TestFailoverIsTimedFromTheKillToTheStandbysLead(t *testing.T) {
	f := newFakeElection()
	f.expireAfter = 150 * time.Millisecond
	r, c := failoverRun(t, f, true)
	if len(r.Failures) > 0 {
		t.Fatalf("failures: %v", r.Failures)
	}
	got := r.Get(c, harness.FailoverTime)
	if len(got) != 1 || got[0] < 150 || got[0] >= 1000 {
		t.Fatalf("failover = %v ms, want one figure from 150 ms (the lease) to under the 1 s limit", got)
	}
	if ttl := r.Get(c, harness.FailoverTTL); len(ttl) != 1 || ttl[0] != 0.1 {
		t.Errorf("TTL = %v s, want [0.1]", ttl)
	}
	if terms := r.Get(c, harness.FailoverTerms); len(terms) != 1 || terms[0] != 1 {
		t.Errorf("terms checked = %v, want [1]", terms)
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md, harness.Machine{}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "## Failover") || !strings.Contains(md.String(), "| fake | **fake election** | 0.1 | 1") {
		t.Errorf("report has no failover row for the contestant:\n%s", md.String())
	}
}

func TestFailoverFailsWhenTheStandbyNeverLeads(t *testing.T) {
	f := newFakeElection()
	f.expireAfter = -1 // the dead leader's lead never runs out
	r, c := failoverRun(t, f, true)
	if len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "did not lead within 1s") {
		t.Fatalf("failures = %q, want one saying the standby did not lead within the limit", r.Failures)
	}
	if got := r.Get(c, harness.FailoverTime); !noFigure(got) {
		t.Errorf("failover = %v, want no figure", got)
	}
}

func TestFailoverFailsWhenTheStandbysTermIsNotLarger(t *testing.T) {
	f := newFakeElection()
	f.sameTerm = true
	r, c := failoverRun(t, f, true)
	if len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "term 5 is not larger than the killed leader's 5") {
		t.Fatalf("failures = %q, want one about the standby's term", r.Failures)
	}
	if got := r.Get(c, harness.FailoverTime); !noFigure(got) {
		t.Errorf("failover = %v, want no figure", got)
	}
}

func TestFailoverFailsWhenTheStandbyLeadsBesideALiveLeader(t *testing.T) {
	f := newFakeElection()
	f.everyone = true
	r, c := failoverRun(t, f, true)
	if len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "two leaders") {
		t.Fatalf("failures = %q, want one about two leaders", r.Failures)
	}
	if got := r.Get(c, harness.FailoverTime); !noFigure(got) {
		t.Errorf("failover = %v, want no figure", got)
	}
}

func TestFailoverFailsWithoutAWayToStartLeaderProcesses(t *testing.T) {
	r, _ := failoverRun(t, newFakeElection(), false)
	if len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "SpawnLeader") {
		t.Fatalf("failures = %q, want one saying leader processes cannot start", r.Failures)
	}
}

func TestFailoverFailsWhenTheLeaderProcessCannotStart(t *testing.T) {
	c := &harness.Contestant{Backend: "fake", Name: "fake election", Role: harness.Ours,
		Elector: &harness.Elector{TTL: time.Second, Open: func(context.Context) (harness.Campaigner, error) {
			return fakeCampaigner{newFakeElection()}, nil
		}}}
	cfg := harness.Config{Only: []harness.Scenario{harness.Failover}, FailoverRepeats: 2,
		SpawnLeader: func(context.Context, *harness.Contestant, string) (harness.LeaderProc, error) {
			return nil, errors.New("exec: no such file")
		}}
	r := harness.Run(context.Background(), cfg, []*harness.Contestant{c})
	if len(r.Failures) != 2 || !strings.Contains(r.Failures[0], "leader process: exec: no such file") {
		t.Fatalf("failures = %q, want one per repeat naming the start's error", r.Failures)
	}
}
