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

func (m memClient) AcquireWatched(ctx context.Context, key string) (harness.Release, harness.Loss, error) {
	l, err := m.lk.Acquire(ctx, key)
	if err != nil {
		return nil, harness.Loss{}, err
	}
	return l.Release, harness.Loss{Done: l.Lost(), Cause: l.Err}, nil
}

func (m memClient) Expires(ctx context.Context, key string) (time.Time, error) {
	in, err := m.lk.Inspect(ctx, key)
	return in.Expires, err
}

// losingClient takes a real lock and has it evicted at once (ForceRelease,
// the operator's tool): every lock is lost while held, as the scale scenario
// must count.
type losingClient struct{ memClient }

func (l losingClient) AcquireWatched(ctx context.Context, key string) (harness.Release, harness.Loss, error) {
	lk, err := l.lk.Acquire(ctx, key)
	if err != nil {
		return nil, harness.Loss{}, err
	}
	if err := l.lk.ForceRelease(ctx, key); err != nil {
		return nil, harness.Loss{}, err
	}
	return lk.Release, harness.Loss{Done: lk.Lost(), Cause: lk.Err}, nil
}

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
	Goroutines: 4, WideGoroutines: 8, Contenders: 8, HeldLocks: 100, HeldTTL: 300 * time.Millisecond,
	HeldWindow: 50 * time.Millisecond, HeldRuns: 1,
	// Readings every 100 ms over 600 ms, refreshes every 200 ms: each probed
	// key shows two or three refreshes.
	ScaleLocks: 200, ScaleTTL: 600 * time.Millisecond, ScaleWindow: 1200 * time.Millisecond, ScaleProbes: 20,
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
	for _, m := range []harness.Metric{harness.UncP50, harness.UncP99, harness.DistinctOps, harness.DistinctWide, harness.Handoffs, harness.MinShare, harness.HeldBytes, harness.HeldConns} {
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

func TestScaleMeasuresRefreshLatenessAndNoLossOfARealLock(t *testing.T) {
	r := memRun(t)
	ours := r.Contestants[0]
	for _, m := range []harness.Metric{harness.ScaleBytes, harness.ScaleGorout, harness.ScaleConns, harness.ScaleLateness, harness.ScaleRefreshes, harness.ScaleLosses} {
		if s := harness.Summarise(r.Get(ours, m)); s.N != 1 {
			t.Errorf("%s: %v, want one figure", m.Key, r.Get(ours, m))
		}
	}
	if n := harness.Summarise(r.Get(ours, harness.ScaleRefreshes)).Median; n < 1 {
		t.Errorf("%v refreshes observed, want some", n)
	}
	// A refresh is due a third of the TTL after the previous one: on the
	// in-process driver it is late by scheduling alone, far below a TTL.
	if late := harness.Summarise(r.Get(ours, harness.ScaleLateness)).Median; late >= 100 {
		t.Errorf("refresh lateness p99 = %v%% of the TTL, want below 100%%", late)
	}
	if n := r.Losses(); n != 0 {
		t.Errorf("a real lock lost %d locks while held", n)
	}
	if got := r.Get(r.Contestants[1], harness.ScaleBytes); len(got) != 0 {
		t.Errorf("a contestant whose held scenario is n/a ran scale: %v", got)
	}
}

func TestScaleCountsEveryLostLockAsAFailure(t *testing.T) {
	losing := memContestant("losing", harness.Peer)
	open := losing.Open
	losing.Open = func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
		cl, err := open(ctx, ttl)
		if err != nil {
			return nil, err
		}
		return losingClient{cl.(memClient)}, nil
	}
	cfg := quick
	cfg.Only = []harness.Scenario{harness.Scale}
	cfg.ScaleLocks, cfg.ScaleWindow = 50, 10*time.Millisecond
	r := harness.Run(context.Background(), cfg, []*harness.Contestant{losing})
	if n := r.Losses(); n != cfg.ScaleLocks {
		t.Fatalf("losses = %d, want every one of the %d locks", n, cfg.ScaleLocks)
	}
	var buf bytes.Buffer
	if err := r.WriteMarkdown(&buf, harness.Machine{}, nil); err != nil {
		t.Fatal(err)
	}
	if want := "Locks lost while held in the scale scenario: **50**"; !strings.Contains(buf.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, buf.String())
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
		"peer, held and scale: n/a, not measured here",
		"Mutual-exclusion violations: **0**",
		"Locks lost while held in the scale scenario: **0**",
		"Many keys held (200 locks, TTL 600ms, 1.2s)", "refresh lateness p99 (% of TTL)",
		"distinct keys, 4 goroutines (ops/s)", "distinct keys, 8 goroutines (ops/s)",
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
