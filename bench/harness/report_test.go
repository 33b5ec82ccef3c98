package harness_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/memdriver"

	"github.com/distlock/lock/bench/harness"
)

// memClient is distlock's in-process driver, a real lock, as a contestant.
type memClient struct{ lk *lock.Locker }

func (m memClient) Acquire(ctx context.Context, key string) (harness.Release, error) {
	l, err := m.lk.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (m memClient) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	l, err := m.lk.TryAcquire(ctx, key)
	if errors.Is(err, lock.ErrLocked) {
		return nil, harness.ErrBusy
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (m memClient) Close() error { return m.lk.Close() }

// noLock lets everybody in: a broken lock the contended scenario must catch.
// noLock lets everybody in, two at a time: an Acquire returns together with
// another one (they meet on pair), so that both are inside at once however
// the machine schedules them, and the harness must count a violation.
type noLock struct{ pair chan struct{} }

func (n noLock) Acquire(ctx context.Context, _ string) (harness.Release, error) {
	select {
	case n.pair <- struct{}{}:
	case <-n.pair:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return func(context.Context) error { return nil }, nil
}
func (n noLock) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	return n.Acquire(ctx, key)
}
func (noLock) Close() error { return nil }

func memContestant(name string, role harness.Role) *harness.Contestant {
	return &harness.Contestant{
		Backend: "mem", Name: name, Role: role, TryUncontended: true, Refreshes: true,
		Server: &harness.Server{},
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			var opts []lock.Option
			if ttl > 0 {
				opts = append(opts, lock.WithTTL(ttl))
			}
			lk, err := lock.Open(ctx, "mem://bench-"+name, opts...)
			return memClient{lk}, err
		},
	}
}

var quick = harness.Config{
	Window: 50 * time.Millisecond, Slices: 2, Warmup: 10 * time.Millisecond, Repeats: 2,
	Goroutines: 4, Contenders: 8, HeldLocks: 100, HeldTTL: 300 * time.Millisecond,
	HeldWindow: 50 * time.Millisecond, HeldRuns: 1,
}

var (
	runOnce sync.Once
	run     *harness.Results
)

// memRun runs every scenario once on two in-process contestants.
func memRun(t *testing.T) *harness.Results {
	runOnce.Do(func() {
		peer := memContestant("peer", harness.Peer)
		peer.NA = map[harness.Scenario]string{harness.Held: "not measured here"}
		run = harness.Run(context.Background(), quick, []*harness.Contestant{memContestant("ours", harness.Ours), peer})
	})
	return run
}

func TestRunMeasuresEveryScenarioOfARealLock(t *testing.T) {
	r := memRun(t)
	if len(r.Failures) > 0 {
		t.Fatalf("failures: %v", r.Failures)
	}
	ours := r.Contestants[0]
	for _, m := range []harness.Metric{harness.UncP50, harness.UncP99, harness.DistinctOps, harness.Handoffs, harness.MinShare, harness.HeldBytes, harness.HeldConns} {
		s := harness.Summarise(r.Get(ours, m))
		if s.N != len(r.Get(ours, m)) || s.N == 0 {
			t.Errorf("%s: %d figures, want one per repeat: %v", m.Key, s.N, r.Get(ours, m))
		}
	}
	if v := r.Violations(); v != 0 {
		t.Errorf("a real lock showed %d exclusion violations", v)
	}
	if got := harness.Summarise(r.Get(ours, harness.Handoffs)).Median; got <= 0 {
		t.Errorf("handoffs/s = %v, want > 0", got)
	}
	if got := r.Get(r.Contestants[1], harness.HeldBytes); len(got) != 0 {
		t.Errorf("a scenario marked n/a has figures: %v", got)
	}
}

func TestContendedCountsViolationsOfABrokenLock(t *testing.T) {
	pair := make(chan struct{})
	broken := &harness.Contestant{
		Backend: "none", Name: "no lock", Role: harness.Peer, Server: &harness.Server{},
		Open: func(context.Context, time.Duration) (harness.Client, error) { return noLock{pair}, nil },
		NA:   map[harness.Scenario]string{harness.Uncontended: "", harness.Distinct: "", harness.Held: ""},
	}
	cfg := quick
	cfg.Repeats = 1
	// Each holder stays inside a while, so that the pair let in together
	// overlaps on any number of CPUs.
	cfg.HoldFor = time.Millisecond
	r := harness.Run(context.Background(), cfg, []*harness.Contestant{broken})
	if v := r.Violations(); v == 0 {
		t.Fatalf("violations = 0 for a lock that lets everybody in")
	}
	var buf bytes.Buffer
	if err := r.WriteMarkdown(&buf, harness.Machine{}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Mutual-exclusion violations: **") || strings.Contains(buf.String(), "**0**") {
		t.Errorf("report does not state the violations:\n%s", buf.String())
	}
}

func TestReportGivesRatiosTargetsAndReasons(t *testing.T) {
	r := memRun(t)
	targets := []harness.Target{
		{Issue: "#1", Backend: "mem", Ours: "ours", Of: "peer", Metric: harness.Handoffs, Bound: 0.01, Text: "easy"},
		{Issue: "#2", Backend: "mem", Ours: "ours", Metric: harness.HeldBytes, Max: true, Bound: 1, Text: "impossible"},
		{Issue: "#3", Backend: "mem", Ours: "ours", Of: "absent", Metric: harness.Handoffs, Bound: 1, Text: "nobody"},
	}
	var buf bytes.Buffer
	if err := r.WriteMarkdown(&buf, harness.Machine{Mode: "test", Command: "go test"}, targets); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"## mem", "| **ours** |", "Ours (ours) ÷ each", "| peer |", "×",
		"#1 mem: handoffs ours ÷ peer ≥ 0.01×: measured", ": met — easy",
		"#2 mem: memory ≤ 1.00 B/lock: measured ", "B/lock: MISSED by ",
		"#3 mem: handoffs ours ÷ absent ≥ 1.00×: not measured: no contestant mem/absent",
		"peer, held: n/a, not measured here",
		"Mutual-exclusion violations: **0**",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestChartIsAPNG(t *testing.T) {
	r := memRun(t)
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := r.WriteChart(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart.png: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 200 {
		t.Errorf("chart is %v, too small to read", b)
	}
}

func TestReadmeSectionHasChartTableCommandAndMeaning(t *testing.T) {
	r := memRun(t)
	var buf bytes.Buffer
	m := harness.Machine{CPU: "a CPU", CPUs: 2, Pinning: "pinned", Servers: "servers"}
	if err := r.WriteReadmeSection(&buf, m); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"](bench/results/chart.png)", "| mem | **ours** |", "| mem | peer |", "×",
		"scripts/bench", "a CPU, 2 CPUs", "What the numbers mean", "do not mean",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("README section lacks %q:\n%s", want, out)
		}
	}
}

func TestSavedRunReportsAsTheOriginal(t *testing.T) {
	r := memRun(t)
	m := harness.Machine{CPU: "a CPU", Mode: "test"}
	var saved bytes.Buffer
	if err := r.Save(&saved, m); err != nil {
		t.Fatal(err)
	}
	loaded, lm, err := harness.Load(&saved)
	if err != nil {
		t.Fatal(err)
	}
	if lm != m {
		t.Errorf("machine = %+v, want %+v", lm, m)
	}
	var a, b bytes.Buffer
	if err := r.WriteMarkdown(&a, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := loaded.WriteMarkdown(&b, m, nil); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("report of the loaded run differs:\n%s\n---\n%s", a.String(), b.String())
	}
}
