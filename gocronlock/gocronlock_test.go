package gocronlock_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/filedriver"
	"github.com/distlock/lock/gocronlock"
	"github.com/distlock/lock/gocronlock/internal/crontest"
	"github.com/distlock/lock/internal/leakcheck"
	_ "github.com/distlock/lock/memdriver"
)

func TestMain(m *testing.M) {
	crontest.Child()
	leakcheck.VerifyTestMain(m)
}

// noLeaks checks, after the test and its cleanups, that nothing it started
// still runs.
func noLeaks(t *testing.T) {
	ignore := leakcheck.IgnoreCurrent()
	t.Cleanup(func() { leakcheck.VerifyNone(t, ignore) })
}

func fileURL(dir string) string { return (&url.URL{Scheme: "file", Path: dir}).String() }

// The scenarios run two real gocron schedulers in two processes on the file
// backend (flock(2) works across processes).

func TestLockerRunsEachTickOnceAcrossTwoProcesses(t *testing.T) {
	crontest.LockerRunsEachTickOnce(t, fileURL(t.TempDir()), 0)
}

func TestLockerWithMinHoldRunsEachTickOnceWhenInstancesTickApart(t *testing.T) {
	crontest.LockerRunsEachTickOnce(t, fileURL(t.TempDir()), 100*time.Millisecond)
}

func TestLockerWithoutMinHoldRunsAShortJobTwiceWhenInstancesTickApart(t *testing.T) {
	crontest.LockerWithoutMinHoldRunsOffsetTicksTwice(t, fileURL(t.TempDir()), 100*time.Millisecond)
}

func TestElectorRunsJobsOnTheLeaderOnlyAndFailsOverWhenItIsKilled(t *testing.T) {
	// flock(2) is freed when the leader's process dies: the follower leads at
	// once, whatever the TTL; a long TTL keeps a stalled refresh on a loaded
	// machine from handing leadership over before the kill.
	crontest.ElectorFailsOver(t, fileURL(t.TempDir()), 10*time.Second, true)
}

// open returns a Locker on a fresh mem:// store shared by every Locker the
// test opens with the same name.
func open(t *testing.T, name string) *lock.Locker {
	t.Helper()
	l, err := lock.Open(context.Background(), "mem://"+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLockIsRefusedWithErrLockedWhileAnotherInstanceRunsTheJob(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	a := gocronlock.NewLocker(open(t, t.Name()))
	defer a.Close()
	b := gocronlock.NewLocker(open(t, t.Name()))
	defer b.Close()

	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("Lock while held elsewhere: %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Lock waited %v; it must make one attempt", d)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock after Unlock without a minimum hold: %v", err)
	}
	// Each run's lock carries its fencing token, larger for every run.
	ta, tb := la.(*gocronlock.Lock).Token(), lb.(*gocronlock.Lock).Token()
	if ta == 0 || tb <= ta {
		t.Errorf("tokens of two runs: %d then %d, want increasing from 1", ta, tb)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Errorf("second Unlock: %v, want nil", err)
	}
}

func TestMinHoldKeepsTheLockUntilItHasPassedSinceLock(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	const hold = 300 * time.Millisecond
	a := gocronlock.NewLocker(open(t, t.Name()), gocronlock.WithMinHold(hold))
	defer a.Close()
	b := gocronlock.NewLocker(open(t, t.Name()))
	defer b.Close()

	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Until the hold has passed, every attempt is refused; then one succeeds.
	var got gocronLock
	waitUntil(t, 10*time.Second, "the lock was never freed after its hold", func() bool {
		tried := time.Now()
		l, err := b.Lock(ctx, "job")
		if err == nil {
			got = l
			return true
		}
		if !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("Lock: %v", err)
		}
		if tried.Sub(taken) > 5*time.Second {
			t.Fatalf("still held %v after Lock", tried.Sub(taken))
		}
		return false
	})
	if d := time.Since(taken); d < hold {
		t.Errorf("another instance took the lock %v after it was taken, within the minimum hold %v", d, hold)
	}
	if err := got.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

type gocronLock interface{ Unlock(context.Context) error }

func TestALongJobIsReleasedAtUnlockDespiteTheMinHold(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	const hold = 50 * time.Millisecond
	a := gocronlock.NewLocker(open(t, t.Name()), gocronlock.WithMinHold(hold))
	defer a.Close()
	b := gocronlock.NewLocker(open(t, t.Name()))
	defer b.Close()
	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// The job outlasts the hold: the wait is the job's duration, not an ordering.
	time.Sleep(2 * hold)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock right after an Unlock past the hold: %v", err)
	}
	lb.Unlock(ctx)
}

func TestUnlockReleasesEvenWhenTheJobContextHasEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	a := gocronlock.NewLocker(open(t, t.Name()))
	b := gocronlock.NewLocker(open(t, t.Name()))
	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	cancel() // gocron's scheduler shut down while the job ran
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with an ended context: %v", err)
	}
	lb, err := b.Lock(context.Background(), "job")
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	lb.Unlock(context.Background())
}

func TestCloseReleasesLocksInTheirHoldAtOnce(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	a := gocronlock.NewLocker(open(t, t.Name()), gocronlock.WithMinHold(time.Hour))
	b := gocronlock.NewLocker(open(t, t.Name()))
	defer b.Close()
	for _, job := range []string{"j1", "j2"} {
		l, err := a.Lock(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Lock(ctx, "j1"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("Lock during an hour's hold: %v, want ErrLocked", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"j1", "j2"} {
		l, err := b.Lock(ctx, job)
		if err != nil {
			t.Fatalf("%s after Close: %v", job, err)
		}
		l.Unlock(ctx)
	}
	if _, err := a.Lock(ctx, "j3"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Lock after Close: %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestUnlockReportsALockLostWhileTheJobRan(t *testing.T) {
	ctx := context.Background()
	a := gocronlock.NewLocker(open(t, t.Name()), gocronlock.WithMinHold(time.Hour),
		gocronlock.WithLockOptions(lock.WithTTL(50*time.Millisecond), lock.WithAutoRefresh(false)))
	defer a.Close()
	l, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.(*gocronlock.Lock).Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("a lock without refresh was not lost after its TTL")
	}
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Unlock of a lost lock: %v, want ErrLost", err)
	}
}

func TestLockOnANilLockerIsAnInvalidArgument(t *testing.T) {
	gl := gocronlock.NewLocker(nil)
	if _, err := gl.Lock(context.Background(), "job"); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Lock: %v, want ErrInvalidArgument", err)
	}
}

func TestKeyPrefixSeparatesJobsFromTheProgramsOwnLocks(t *testing.T) {
	ctx := context.Background()
	ll := open(t, t.Name())
	own, err := ll.TryAcquire(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release(ctx)
	a := gocronlock.NewLocker(ll)
	defer a.Close()
	l, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("job %q collides with the program's own lock: %v", "report", err)
	}
	l.Unlock(ctx)
	p := gocronlock.NewLocker(ll, gocronlock.WithKeyPrefix(""))
	defer p.Close()
	if _, err := p.Lock(ctx, "report"); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("with an empty prefix the job's key is its name: %v, want ErrLocked", err)
	}
}

func TestExactlyOneElectorLeadsAndAnotherTakesOverWhenItCloses(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	var els []*gocronlock.Elector
	for range 3 {
		e, err := gocronlock.NewElector(ctx, open(t, t.Name()), "leader")
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		els = append(els, e)
	}
	leaders := func() []*gocronlock.Elector {
		var ls []*gocronlock.Elector
		for _, e := range els {
			if e.IsLeader(ctx) == nil {
				ls = append(ls, e)
			}
		}
		return ls
	}
	waitUntil(t, 10*time.Second, "no elector leads", func() bool { return len(leaders()) > 0 })
	first := leaders()
	if len(first) != 1 {
		t.Fatalf("%d electors lead at once", len(first))
	}
	if first[0].Leadership() == nil {
		t.Error("the leader has no Leadership")
	}
	for _, e := range els {
		if e != first[0] {
			if err := e.IsLeader(ctx); !errors.Is(err, gocronlock.ErrNotLeader) {
				t.Errorf("a follower's IsLeader: %v, want ErrNotLeader", err)
			}
		}
	}
	if err := first[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := first[0].IsLeader(ctx); !errors.Is(err, gocronlock.ErrNotLeader) {
		t.Errorf("IsLeader after Close: %v, want ErrNotLeader", err)
	}
	waitUntil(t, 10*time.Second, "no elector took over after the leader closed", func() bool { return len(leaders()) == 1 })
	if l := leaders(); len(l) != 1 || l[0] == first[0] {
		t.Errorf("after the leader closed: %d leaders", len(l))
	}
}

func TestElectorStopsLeadingWhenItsLeadershipIsLostAndCampaignsAgain(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	ll := open(t, t.Name())
	e, err := gocronlock.NewElector(ctx, ll, "leader")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitUntil(t, 10*time.Second, "the only elector never led", func() bool { return e.IsLeader(ctx) == nil })
	ld := e.Leadership()
	// An operator evicts the leader: its Lost fires, IsLeader says no at
	// once, and the elector wins the next term.
	if err := ll.ForceRelease(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	<-ld.Lost()
	if ld2 := e.Leadership(); ld2 == ld {
		t.Error("Leadership still returns the lost leadership")
	}
	waitUntil(t, 10*time.Second, "the elector did not lead again", func() bool {
		ld2 := e.Leadership()
		return ld2 != nil && ld2 != ld
	})
	if ld2 := e.Leadership(); ld2 != nil && ld2.Token() <= ld.Token() {
		t.Errorf("new term %d not above the lost one %d", ld2.Token(), ld.Token())
	}
}

func TestElectorWithAnInvalidNameReportsWhyItCannotLead(t *testing.T) {
	ctx := context.Background()
	e, err := gocronlock.NewElector(ctx, open(t, t.Name()), "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitUntil(t, 10*time.Second, "IsLeader did not report the invalid name", func() bool {
		return errors.Is(e.IsLeader(ctx), lock.ErrInvalidKey)
	})
	if err := e.IsLeader(ctx); !errors.Is(err, gocronlock.ErrNotLeader) {
		t.Errorf("IsLeader: %v, want it to match ErrNotLeader too", err)
	}
	if _, err := gocronlock.NewElector(ctx, nil, "x"); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("NewElector with a nil Locker: %v, want ErrInvalidArgument", err)
	}
}

func TestElectorStopsWhenItsContextEnds(t *testing.T) {
	noLeaks(t)
	ctx, cancel := context.WithCancel(context.Background())
	ll := open(t, t.Name())
	e, err := gocronlock.NewElector(ctx, ll, "leader")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the only elector never led", func() bool { return e.IsLeader(context.Background()) == nil })
	cancel()
	// Its leadership is resigned: another campaigner leads at once.
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	ld, err := ll.Campaign(cctx, "leader", "next")
	if err != nil {
		t.Fatalf("the elector did not resign when its context ended: %v", err)
	}
	ld.Resign(context.Background())
	e.Close()
}
