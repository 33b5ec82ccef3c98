package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
)

// hangingRefresh is memdriver whose Refresh never answers until its context ends,
// as a backend behind a silent network would.
type hangingRefresh struct{ *memdriver.Driver }

func (h hangingRefresh) Refresh(ctx context.Context, _ *driver.Request) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestLostClosesAtDeadlineWhileRefreshHangs(t *testing.T) {
	ctx := context.Background()
	// The grace moves the validity deadline 200ms before the TTL, so a loaded
	// machine's late timer still closes Lost before the TTL, which is the
	// property: the deadline ends the lock, not the hanging refresh.
	const ttl, grace = time.Second, 200 * time.Millisecond
	validity := ttl - driver.Drift(ttl) - grace
	lk := lock.New(hangingRefresh{memdriver.New(t.Name())}, lock.WithTTL(ttl), lock.WithGrace(grace))
	defer lk.Close()
	start := time.Now()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(ttl + time.Second):
		t.Fatal("Lost() did not close although no refresh was ever confirmed")
	}
	if took := time.Since(start); took >= ttl || took < validity {
		t.Errorf("Lost() closed after %v, want at the validity deadline %v (TTL %v minus drift and grace), before the TTL", took, validity, ttl)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release after the deadline = %v, want ErrLost", err)
	}
}

// countingBatch is memdriver that counts how refreshes arrive.
type countingBatch struct {
	*memdriver.Driver
	batches, batched, single atomic.Int64
}

func (c *countingBatch) Refresh(ctx context.Context, req *driver.Request) error {
	c.single.Add(1)
	return c.Driver.Refresh(ctx, req)
}

func (c *countingBatch) RefreshBatch(ctx context.Context, reqs []*driver.Request) []error {
	c.batches.Add(1)
	c.batched.Add(int64(len(reqs)))
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		errs[i] = c.Driver.Refresh(ctx, r)
	}
	return errs
}

func TestManyHeldLocksAreRefreshedInBatchesAndKept(t *testing.T) {
	ctx := context.Background()
	const n, ttl = 2000, time.Second // a TTL a loaded -race run cannot stall through
	d := &countingBatch{Driver: memdriver.New(t.Name())}
	lk := lock.New(d, lock.WithTTL(ttl))
	defer lk.Close()
	held := make([]*lock.Lock, n)
	for i := range held {
		l, err := lk.Acquire(ctx, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	time.Sleep(3 * ttl) // time must pass for refreshes to happen
	for i, l := range held {
		select {
		case <-l.Lost():
			t.Fatalf("lock %d lost while refreshed on a healthy backend", i)
		default:
		}
	}
	refreshed := d.batched.Load() + d.single.Load()
	if refreshed < n*2 {
		t.Errorf("%d refreshes for %d locks over 3 TTLs, want at least %d", refreshed, n, n*2)
	}
	if d.batches.Load() == 0 || d.batched.Load() < refreshed*9/10 {
		t.Errorf("%d of %d refreshes went through %d batches; want most batched", d.batched.Load(), refreshed, d.batches.Load())
	}
	t.Logf("%d refreshes, %d in %d batches (%.0f per batch)", refreshed, d.batched.Load(), d.batches.Load(), float64(d.batched.Load())/float64(d.batches.Load()))
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A refresh that fails for a while but succeeds before the deadline keeps the
// lock: transient errors are retried, not treated as loss.
type flakyRefresh struct {
	*memdriver.Driver
	failures atomic.Int64
}

func (f *flakyRefresh) Refresh(ctx context.Context, req *driver.Request) error {
	if f.failures.Add(1) <= 2 {
		return errors.New("connection reset by peer")
	}
	return f.Driver.Refresh(ctx, req)
}

func TestTransientRefreshErrorsAreRetriedBeforeTheDeadline(t *testing.T) {
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	d := &flakyRefresh{Driver: memdriver.New(t.Name())}
	lk := lock.New(d, lock.WithTTL(ttl))
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
		t.Fatal("lost after transient refresh errors that a retry overcame")
	case <-time.After(2 * ttl):
	}
	if d.failures.Load() < 3 {
		t.Fatalf("only %d refresh attempts", d.failures.Load())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// slowRelease is memdriver whose Release removes the lock at once but answers
// only after an automatic refresh has seen the lock gone (or after 10s), so the
// refresh's outcome meets a Release still under way.
type slowRelease struct {
	*memdriver.Driver
	refreshesAfterRemoval atomic.Int64
	removed               atomic.Bool
	sawRemoval            chan struct{} // closed by the first refresh after the removal
}

func (s *slowRelease) Release(ctx context.Context, req *driver.Request) error {
	err := s.Driver.Release(ctx, req)
	s.removed.Store(true)
	select {
	case <-s.sawRemoval:
	case <-time.After(10 * time.Second):
	}
	return err
}

func (s *slowRelease) Refresh(ctx context.Context, req *driver.Request) error {
	err := s.Driver.Refresh(ctx, req)
	if s.removed.Load() && s.refreshesAfterRemoval.Add(1) == 1 {
		close(s.sawRemoval)
	}
	return err
}

func TestRefreshRacingOwnReleaseDoesNotReportLoss(t *testing.T) {
	ctx := context.Background()
	d := &slowRelease{Driver: memdriver.New(t.Name()), sawRemoval: make(chan struct{})}
	lk := lock.New(d, lock.WithTTL(time.Second)) // refresh every 333ms
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if d.refreshesAfterRemoval.Load() == 0 {
		t.Fatal("no refresh ran while Release was answering; the race was not exercised")
	}
	select {
	case <-l.Lost():
		t.Error("Lost() closed by a refresh that saw our own successful Release")
	default:
	}
}

// A manual Refresh while automatic refreshes run moves the lock's deadline
// under its shard's mutex; the automatic refresh must read the deadlines of
// its batch under it too (under -race this test failed when it did not).
func TestManualRefreshBesideAutomaticRefreshesIsRaceFree(t *testing.T) {
	ctx := context.Background()
	// Automatic refreshes every 100ms; a TTL far above a loaded machine's
	// stalls, so that only a race, not an expiry, can fail a Refresh.
	const ttl = 300 * time.Millisecond
	lk := lock.New(memdriver.New(t.Name()), lock.WithTTL(ttl))
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(700 * time.Millisecond); time.Now().Before(end); {
		if err := l.Refresh(ctx); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Locks taken from many goroutines at once land in every shard of the
// Locker's schedule: each is refreshed (in batches) and kept, and Close
// releases every one of them, whichever shard it is in.
func TestLocksHeldFromManyGoroutinesAreKeptAndAllReleasedByClose(t *testing.T) {
	ctx := context.Background()
	const goroutines, perGoroutine, ttl = 16, 20, 2 * time.Second
	d := &countingBatch{Driver: memdriver.New(t.Name())}
	lk := lock.New(d, lock.WithTTL(ttl))
	var wg sync.WaitGroup
	held := make(chan *lock.Lock, goroutines*perGoroutine)
	errs := make(chan error, goroutines*perGoroutine)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perGoroutine {
				l, err := lk.Acquire(ctx, fmt.Sprintf("g%d/k%d", g, i))
				if err != nil {
					errs <- err
					return
				}
				held <- l
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(held)
	for err := range errs {
		t.Fatal(err)
	}
	// Wait, with a bound, until every lock was refreshed at least once.
	bound := time.Now().Add(10 * ttl)
	for d.batched.Load()+d.single.Load() < goroutines*perGoroutine {
		if time.Now().After(bound) {
			t.Fatalf("%d refreshes after %v, want one per lock (%d)", d.batched.Load()+d.single.Load(), 10*ttl, goroutines*perGoroutine)
		}
		time.Sleep(10 * time.Millisecond) // polling a counter, not ordering events
	}
	var locks []*lock.Lock
	for l := range held {
		select {
		case <-l.Lost():
			t.Fatalf("%s lost while refreshed on a healthy backend", l.Key())
		default:
		}
		locks = append(locks, l)
	}
	if err := lk.Close(); err != nil {
		t.Fatal(err)
	}
	other := lock.New(memdriver.New(t.Name()))
	defer other.Close()
	for _, l := range locks {
		select {
		case <-l.Lost():
		default:
			t.Errorf("%s: Lost still open after Close", l.Key())
		}
		got, err := other.TryAcquire(ctx, l.Key())
		if err != nil {
			t.Fatalf("%s after Close: %v, want it free", l.Key(), err)
		}
		_ = got.Release(ctx)
	}
}
