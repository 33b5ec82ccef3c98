package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"

	"github.com/distlock/lock/bench/harness"
)

// shapedMem is distlock's in-process driver with its read-write locks and
// semaphores: a real implementation of both shapes.
type shapedMem struct{ memClient }

func (m shapedMem) AcquireRW(ctx context.Context, key string, shared bool) (harness.Release, error) {
	l, err := m.lk.Acquire(ctx, key, lock.WithShared(shared))
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (m shapedMem) AcquirePermit(ctx context.Context, key string, permits int) (harness.Release, error) {
	l, err := m.lk.Acquire(ctx, key, lock.WithPermits(permits))
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// shapeCfg runs the shape scenarios only, each holder inside for a while so
// that holders overlap on any number of CPUs.
func shapeCfg(only ...harness.Scenario) harness.Config {
	return harness.Config{
		Window: 200 * time.Millisecond, Slices: 2, Warmup: 10 * time.Millisecond, Repeats: 1,
		ShapeGoroutines: 16, ShapeClients: 4, ReadShare: 0.9, Permits: 4, ShapeHold: time.Millisecond,
		Only: only,
	}
}

// fakeContestant opens clients made by open, in the shape scenarios only.
func fakeContestant(name string, role harness.Role, open func() harness.Client) *harness.Contestant {
	return &harness.Contestant{
		Backend: "fake", Name: name, Role: role, Server: &harness.Server{},
		Open: func(context.Context, time.Duration) (harness.Client, error) { return open(), nil },
	}
}

func TestShapeScenariosMeasureARealReadWriteLockAndSemaphore(t *testing.T) {
	ours := memContestant("shapes", harness.Ours)
	open := ours.Open
	ours.Open = func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
		c, err := open(ctx, ttl)
		if err != nil {
			return nil, err
		}
		return shapedMem{c.(memClient)}, nil
	}
	r := harness.Run(context.Background(), shapeCfg(harness.ReadHeavy, harness.Semaphore), []*harness.Contestant{ours})
	if len(r.Failures) > 0 {
		t.Fatalf("failures: %v", r.Failures)
	}
	if v := r.Violations(); v != 0 {
		t.Errorf("a real lock showed %d violations", v)
	}
	for _, m := range []harness.Metric{harness.RWOps, harness.RWReadP50, harness.RWReadP99, harness.RWWriteP50, harness.RWWriteP99, harness.RWWriteMax, harness.SemOps, harness.SemP50, harness.SemP99, harness.SemMax} {
		if s := harness.Summarise(r.Get(ours, m)); s.N != 1 || s.Median <= 0 {
			t.Errorf("%s = %v, want one positive figure", m.Key, r.Get(ours, m))
		}
	}
	for _, m := range []harness.Metric{harness.RWMinShare, harness.SemMinShare} {
		if s := harness.Summarise(r.Get(ours, m)); s.N != 1 || s.Median <= 0 {
			t.Errorf("%s = %v: a FIFO lock starved a goroutine", m.Key, r.Get(ours, m))
		}
	}
	if got := harness.Summarise(r.Get(ours, harness.RWReaders)).Median; got < 2 {
		t.Errorf("most readers together = %v, want at least 2 (shared locks overlap)", got)
	}
	if got := harness.Summarise(r.Get(ours, harness.SemHolders)).Median; got < 2 || got > 4 {
		t.Errorf("most permit holders together = %v, want 2..4", got)
	}
	var buf bytes.Buffer
	if err := r.WriteMarkdown(&buf, harness.Machine{}, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Read-write locks: read-heavy", "## Semaphores", "| mem | **shapes** |", "writer worst wait (ms)", "most holders together"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "## mem\n") || strings.Contains(buf.String(), "## Summary") {
		t.Errorf("a run of the shape scenarios only has the mutex tables:\n%s", buf.String())
	}

	// Rendered again from results.json, the report is the same.
	var saved, again bytes.Buffer
	if err := r.Save(&saved, harness.Machine{}); err != nil {
		t.Fatal(err)
	}
	loaded, _, err := harness.Load(&saved)
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.WriteMarkdown(&again, harness.Machine{}, nil); err != nil {
		t.Fatal(err)
	}
	if again.String() != buf.String() {
		t.Errorf("report of the loaded run differs:\n%s\n---\n%s", buf.String(), again.String())
	}
}

// pairRW lets everybody in, readers and writers alike, two at a time (they
// meet on pair): a writer is let in beside another holder.
type pairRW struct {
	noLock
}

func (p pairRW) AcquireRW(ctx context.Context, key string, _ bool) (harness.Release, error) {
	return p.Acquire(ctx, key)
}

func TestReadHeavyCountsAWriterBesideOthers(t *testing.T) {
	pair := make(chan struct{})
	broken := fakeContestant("writer among readers", harness.Peer, func() harness.Client { return pairRW{noLock{pair}} })
	cfg := shapeCfg(harness.ReadHeavy)
	cfg.ReadShare = 0.5 // many writers, each let in beside its pair
	r := harness.Run(context.Background(), cfg, []*harness.Contestant{broken})
	if v := harness.Summarise(r.Get(broken, harness.RWViolations)).Median; v == 0 {
		t.Fatalf("violations = %v for a lock that lets writers in beside others (failures: %v)", r.Get(broken, harness.RWViolations), r.Failures)
	}
	if r.Violations() == 0 {
		t.Errorf("Results.Violations() = 0: the run would not fail")
	}
}

// mutexRW is an exclusive lock passing for a read-write lock: safe, but
// readers never share it.
type mutexRW struct {
	noTryClient
	mu *sync.Mutex
}

func (m mutexRW) AcquireRW(ctx context.Context, _ string, _ bool) (harness.Release, error) {
	m.mu.Lock()
	return func(context.Context) error { m.mu.Unlock(); return nil }, nil
}

func (m mutexRW) AcquirePermit(ctx context.Context, key string, _ int) (harness.Release, error) {
	return m.AcquireRW(ctx, key, false)
}

// noTryClient fills in the Client methods the shape scenarios do not call.
type noTryClient struct{}

func (noTryClient) Acquire(context.Context, string) (harness.Release, error) {
	return nil, harness.ErrNoTry
}
func (noTryClient) TryAcquire(context.Context, string) (harness.Release, error) {
	return nil, harness.ErrNoTry
}
func (noTryClient) Close() error { return nil }

func TestShapeScenariosFailAnExclusiveLockPassingForAShape(t *testing.T) {
	var mu sync.Mutex
	broken := fakeContestant("mutex", harness.Peer, func() harness.Client { return mutexRW{mu: &mu} })
	cfg := shapeCfg(harness.ReadHeavy, harness.Semaphore)
	cfg.ShapeHold = 0 // enough acquisitions for the check in a short window
	r := harness.Run(context.Background(), cfg, []*harness.Contestant{broken})
	joined := strings.Join(r.Failures, "\n")
	for _, want := range []string{"read-heavy, repeat 1: readers never held the lock together", "semaphore, repeat 1: never two permit holders together"} {
		if !strings.Contains(joined, want) {
			t.Errorf("failures lack %q: %v", want, r.Failures)
		}
	}
	if v := r.Violations(); v != 0 {
		t.Errorf("violations = %d for a lock that is safe", v)
	}
}

// chanSem is a semaphore of the given capacity, whatever the caller asks.
type chanSem struct {
	noTryClient
	slots chan struct{}
}

func (c chanSem) AcquirePermit(ctx context.Context, _ string, _ int) (harness.Release, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return func(context.Context) error { <-c.slots; return nil }, nil
}

func TestSemaphoreCountsOneHolderTooMany(t *testing.T) {
	cfg := shapeCfg(harness.Semaphore)
	slots := make(chan struct{}, cfg.Permits+1)
	broken := fakeContestant("n+1", harness.Peer, func() harness.Client { return chanSem{slots: slots} })
	r := harness.Run(context.Background(), cfg, []*harness.Contestant{broken})
	if v := harness.Summarise(r.Get(broken, harness.SemViolations)).Median; v == 0 {
		t.Fatalf("violations = %v for a semaphore that admits %d (failures: %v)", r.Get(broken, harness.SemViolations), cfg.Permits+1, r.Failures)
	}
	if got := harness.Summarise(r.Get(broken, harness.SemHolders)).Median; got != float64(cfg.Permits+1) {
		t.Errorf("most holders together = %v, want %d", got, cfg.Permits+1)
	}

	// The same semaphore at the right capacity is clean.
	exact := make(chan struct{}, cfg.Permits)
	good := fakeContestant("n", harness.Peer, func() harness.Client { return chanSem{slots: exact} })
	r = harness.Run(context.Background(), cfg, []*harness.Contestant{good})
	if v := r.Violations(); v != 0 || len(r.Failures) > 0 {
		t.Errorf("a semaphore of %d permits: %d violations, failures %v", cfg.Permits, v, r.Failures)
	}
}

// refusing is a client whose driver lacks the shapes, as ours on a backend
// without shared locks or semaphores.
type refusing struct{ noTryClient }

func (refusing) AcquireRW(context.Context, string, bool) (harness.Release, error) {
	return nil, fmt.Errorf("%w: no shared locks on this backend", harness.ErrUnsupported)
}

func (refusing) AcquirePermit(context.Context, string, int) (harness.Release, error) {
	return nil, fmt.Errorf("acquire: %w", harness.ErrUnsupported)
}

func TestAShapeTheDriverLacksIsNotApplicableNotAFailure(t *testing.T) {
	c := fakeContestant("refusing", harness.Ours, func() harness.Client { return refusing{} })
	plain := fakeContestant("mutex only", harness.Peer, func() harness.Client { return noTryClient{} })
	r := harness.Run(context.Background(), shapeCfg(harness.ReadHeavy, harness.Semaphore), []*harness.Contestant{c, plain})
	if len(r.Failures) > 0 {
		t.Fatalf("failures: %v", r.Failures)
	}
	if why := c.NA[harness.ReadHeavy]; why != "no shared locks on this backend" {
		t.Errorf("read-heavy n/a reason = %q", why)
	}
	if _, na := c.NA[harness.Semaphore]; !na {
		t.Errorf("semaphore not n/a for a driver that refuses it")
	}
	if why := plain.NA[harness.ReadHeavy]; !strings.Contains(why, "no read-heavy lock") {
		t.Errorf("read-heavy n/a reason for a mutex-only adapter = %q", why)
	}
	var buf bytes.Buffer
	if err := r.WriteMarkdown(&buf, harness.Machine{}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "- fake, refusing: n/a, no shared locks on this backend") {
		t.Errorf("report does not say why:\n%s", buf.String())
	}
}

// shut is a semaphore client that never gets a permit: its goroutines starve.
type shut struct{ noTryClient }

func (shut) AcquirePermit(ctx context.Context, _ string, _ int) (harness.Release, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestSemaphoreMinShareShowsAStarvedClient(t *testing.T) {
	cfg := shapeCfg(harness.Semaphore)
	slots := make(chan struct{}, cfg.Permits)
	var opened int
	var mu sync.Mutex
	c := fakeContestant("one client starved", harness.Peer, func() harness.Client {
		mu.Lock()
		defer mu.Unlock()
		opened++
		if opened%cfg.ShapeClients == 1 {
			return shut{} // the first client of each trial
		}
		return chanSem{slots: slots}
	})
	r := harness.Run(context.Background(), cfg, []*harness.Contestant{c})
	if len(r.Failures) > 0 {
		t.Fatalf("failures: %v", r.Failures)
	}
	if got := r.Get(c, harness.SemMinShare); len(got) != 1 || got[0] != 0 {
		t.Errorf("min share = %v, want 0: a quarter of the goroutines never got a permit", got)
	}
	if got := harness.Summarise(r.Get(c, harness.SemMax)).Median; got < float64(cfg.Window/time.Duration(cfg.Slices))/float64(time.Millisecond)*0.5 {
		t.Errorf("worst wait = %v ms, want near a whole turn (%v): a starved waiter's wait counts up to the end of the turn", got, cfg.Window/time.Duration(cfg.Slices))
	}
}
