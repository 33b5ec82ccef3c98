package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
)

func TestMain(m *testing.M) {
	conformance.HolderMain() // the holder processes of the fault properties
	leakcheck.VerifyTestMain(m)
}

// The suite must be able to fail: each deliberately broken driver below runs the
// properties it breaks in a child test process, and the properties must fail there.
func TestSuiteCatchesBrokenDrivers(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("inside a broken-driver child process")
	}
	for _, c := range []struct {
		broken string
		run    string   // properties to run in the child
		fail   []string // of which these must fail
	}{
		{
			broken: "no-owner-check",
			run:    "ReleaseAndRefreshCheckTheOwner|ReleaseByExpiredHolderKeepsNewOwnersLock|ReleaseBySeveredHolderKeepsNewOwnersLock|StaleSharedAndPermitHoldersCannotFreeOthers",
			fail:   []string{"ReleaseAndRefreshCheckTheOwner", "ReleaseByExpiredHolderKeepsNewOwnersLock", "ReleaseBySeveredHolderKeepsNewOwnersLock", "StaleSharedAndPermitHoldersCannotFreeOthers"},
		},
		{
			broken: "constant-tokens",
			run:    "TokensIncreaseAcrossHolders|TokensIncreaseAcrossExpiry|TokensIncreaseAcrossClientRestart|MutualExclusionUnderContention",
			fail:   []string{"TokensIncreaseAcrossHolders", "TokensIncreaseAcrossExpiry", "TokensIncreaseAcrossClientRestart", "MutualExclusionUnderContention"},
		},
		{
			broken: "slow-poller",
			run:    "BlockedWaiterWakesPromptlyOnRelease",
			fail:   []string{"BlockedWaiterWakesPromptlyOnRelease"},
		},
		{
			// Wakes promptly, but by polling: its wake-ups are all timer's.
			broken: "fast-poller",
			run:    "AHandoffWakesTheWaiterByNotification",
			fail:   []string{"AHandoffWakesTheWaiterByNotification"},
		},
		{
			broken: "never-lost",
			run:    "LostClosesWhenSessionSevered|DoCancelsFnAndReportsErrLostOnLoss|SharedAndPermitHoldersSeeLostAndAreReleasedByClose",
			fail:   []string{"LostClosesWhenSessionSevered", "DoCancelsFnAndReportsErrLostOnLoss", "SharedAndPermitHoldersSeeLostAndAreReleasedByClose"},
		},
		{
			broken: "wrong-cause",
			run:    "LostClosesWhenSessionSevered|DoCancelsFnAndReportsErrLostOnLoss",
			fail:   []string{"LostClosesWhenSessionSevered", "DoCancelsFnAndReportsErrLostOnLoss"},
		},
		{
			broken: "no-exclusion",
			run:    "MutualExclusionUnderContention|TryAcquireReportsLockedWhileHeld|ExactlyOneLeaderAmongCampaigners",
			fail:   []string{"MutualExclusionUnderContention", "TryAcquireReportsLockedWhileHeld", "ExactlyOneLeaderAmongCampaigners"},
		},
		{
			// Inspect reports the first token ever granted, and no names.
			broken: "inspect-stale",
			run:    "InspectAgreesWithHolders|LeaderReportsValueTermAndStart",
			fail:   []string{"InspectAgreesWithHolders", "LeaderReportsValueTermAndStart"},
		},
		{
			// ForceRelease deletes the key and tells no one why.
			broken: "force-release-silent",
			run:    "ForceReleaseEvictsAndFences",
			fail:   []string{"ForceReleaseEvictsAndFences"},
		},
		{
			// Watch never signals: Observe learns only by its safety poll.
			broken: "watch-silent",
			run:    "ObserveSeesEveryChangeInOrder",
			fail:   []string{"ObserveSeesEveryChangeInOrder"},
		},
		{
			// A writer that polls instead of queueing: overlapping readers
			// keep the key busy until the stream ends.
			broken: "no-writer-preference",
			run:    "WriterIsNotStarvedByAStreamOfReaders",
			fail:   []string{"WriterIsNotStarvedByAStreamOfReaders"},
		},
		{
			broken: "readers-ignore-writers",
			run:    "ExclusiveAndSharedExcludeEachOther",
			fail:   []string{"ExclusiveAndSharedExcludeEachOther"},
		},
		{
			broken: "shared-is-exclusive",
			run:    "SharedHoldersRunTogether",
			fail:   []string{"SharedHoldersRunTogether"},
		},
		{
			// The semaphore admits n+1.
			broken: "extra-permit",
			run:    "PermitsAdmitNHoldersAndNoMore|PermitHoldersNeverExceedNUnderContention",
			fail:   []string{"PermitsAdmitNHoldersAndNoMore", "PermitHoldersNeverExceedNUnderContention"},
		},
		{
			broken: "permits-never-expire",
			run:    "StoppedPermitHoldersFreeTheirPermitsWithinTTL",
			fail:   []string{"StoppedPermitHoldersFreeTheirPermitsWithinTTL"},
		},
		{
			// Capabilities claim the TTLs the Redis driver once claimed,
			// 1ms and the whole range of time.Duration.
			broken: "overstated-ttl-range",
			run:    "CapabilitiesStateTheTTLRangeAcquireAccepts",
			fail:   []string{"CapabilitiesStateTheTTLRangeAcquireAccepts"},
		},
		{
			// A semaphore asked with another n is granted as one of the n in use.
			broken: "other-n-granted",
			run:    "PermitsOfAnotherNumberAreInvalidWhileTheSemaphoreIsInUse",
			fail:   []string{"PermitsOfAnotherNumberAreInvalidWhileTheSemaphoreIsInUse"},
		},
		{
			// Locks and semaphores of one key live apart, as PostgreSQL's do.
			broken: "shapes-apart",
			run:    "AKeyInUseInOneShapeIsNotGrantedInAnother",
			fail:   []string{"AKeyInUseInOneShapeIsNotGrantedInAnother"},
		},
		{
			// Sets taken in the order named: opposite orders deadlock.
			broken: "set-in-given-order",
			run:    "SetsNamedInOppositeOrdersNeverDeadlockNorOverlap",
			fail:   []string{"SetsNamedInOppositeOrdersNeverDeadlockNorOverlap"},
		},
		{
			// A set that fails keeps the members it took (redisson #4456).
			broken: "set-keeps-partial",
			run:    "TryAcquireAllWithOneHeldKeyLeavesNoneHeld|AcquireAllEndedMidwayLeavesNothingHeld",
			fail:   []string{"TryAcquireAllWithOneHeldKeyLeavesNoneHeld", "AcquireAllEndedMidwayLeavesNothingHeld"},
		},
		{
			// A set whose Lost never closes and whose Err stays nil.
			broken: "set-blind-to-loss",
			run:    "LostMemberClosesTheSetsLostNamingItsKey",
			fail:   []string{"LostMemberClosesTheSetsLostNamingItsKey"},
		},
		{
			// Shared and permit grants reuse the last token.
			broken: "shape-tokens-stall",
			run:    "TokensIncreaseAcrossSharedExclusiveAndPermitGrants",
			fail:   []string{"TokensIncreaseAcrossSharedExclusiveAndPermitGrants"},
		},
	} {
		t.Run(c.broken, func(t *testing.T) {
			failed, out := runBroken(t, "TestBrokenDriver", brokenEnv, c.broken, c.run)
			for _, p := range c.fail {
				if !failed[p] {
					t.Errorf("property %s passed against the %s driver; want it to fail\nchild output:\n%s", p, c.broken, out)
				}
			}
		})
	}
}

const brokenEnv = "DISTLOCK_CONFORMANCE_BROKEN"

// TestBrokenDriver runs the suite against a broken driver; it only runs in the
// child process that TestSuiteCatchesBrokenDrivers starts, and is expected to fail.
func TestBrokenDriver(t *testing.T) {
	kind := os.Getenv(brokenEnv)
	if kind == "" {
		t.Skip("runs only as a child of TestSuiteCatchesBrokenDrivers")
	}
	if take := brokenSets[kind]; take != nil {
		conformance.BreakSets(take, 3*time.Second)
	}
	conformance.Run(t, conformance.Harness{
		NewDriver: func(context.Context) (driver.Driver, error) {
			return &broken{Driver: memdriver.New("broken-" + kind), kind: kind}, nil
		},
		Sever: func(_ context.Context, d driver.Driver) error {
			d.(*broken).Sever()
			return nil
		},
		SeverCause: lock.ErrSessionExpired,
	})
}

func runBroken(t *testing.T, test, env, kind, run string) (map[string]bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^"+test+"$/^("+run+")$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+kind)
	out, _ := cmd.CombinedOutput() // the child is meant to fail
	failed := map[string]bool{}
	re := regexp.MustCompile(`--- FAIL: ` + test + `/(\S+)`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			failed[m[1]] = true
		}
	}
	if len(failed) == 0 && !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child ran no property:\n%s", out)
	}
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%s driver fails: %s", kind, strings.Join(names, ", "))
	return failed, string(out)
}

// broken is memdriver with one deliberate fault.
type broken struct {
	*memdriver.Driver
	kind string

	mu   sync.Mutex
	last map[string]uint64 // shape-tokens-stall: the last token per key
}

// firstN is, for other-n-granted, the first n asked per key by any client
// of the broken store (each client is a broken driver of its own).
var firstN sync.Map

// shaped returns the request the broken driver passes on: a copy, changed for
// the kinds that break the shapes.
func (b *broken) shaped(req *driver.Request) *driver.Request {
	r := *req
	switch {
	case b.kind == "shared-is-exclusive":
		r.Shared = false
	case b.kind == "extra-permit" && r.Permits > 0:
		r.Permits++
	case b.kind == "permits-never-expire" && r.Permits > 0:
		r.TTL = time.Hour
	case b.kind == "other-n-granted" && r.Permits > 0:
		n, _ := firstN.LoadOrStore(r.Key, r.Permits)
		r.Permits = n.(int)
	}
	return b.apart(&r)
}

// apart gives a semaphore's requests a key of their own, for shapes-apart.
func (b *broken) apart(req *driver.Request) *driver.Request {
	if b.kind != "shapes-apart" || req.Permits == 0 {
		return req
	}
	r := *req
	r.Key += "#permits"
	return &r
}

func (b *broken) Capabilities() driver.Capabilities {
	c := b.Driver.Capabilities()
	if b.kind == "overstated-ttl-range" {
		c.MinTTL, c.MaxTTL = time.Millisecond, math.MaxInt64
	}
	return c
}

func (b *broken) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if b.kind == "no-exclusion" || (b.kind == "readers-ignore-writers" && req.Shared) {
		return driver.Grant{Token: 1}, nil
	}
	g, err := b.Driver.TryAcquire(ctx, b.shaped(req))
	if b.kind == "constant-tokens" && err == nil {
		g.Token = 1
	}
	return b.stallToken(req, g, err)
}

// stallToken gives shared and permit grants the last token granted on the key
// instead of a new one, for shape-tokens-stall.
func (b *broken) stallToken(req *driver.Request, g driver.Grant, err error) (driver.Grant, error) {
	if b.kind != "shape-tokens-stall" || err != nil {
		return g, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[string]uint64{}
	}
	if (req.Shared || req.Permits > 0) && b.last[req.Key] > 0 {
		g.Token = b.last[req.Key]
	}
	b.last[req.Key] = g.Token
	return g, nil
}

func (b *broken) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	switch {
	case b.kind == "slow-poller":
		for {
			g, err := b.TryAcquire(ctx, req)
			if err == nil || ctx.Err() != nil {
				return g, err
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	case b.kind == "fast-poller":
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			g, err := b.TryAcquire(ctx, req)
			if err == nil || ctx.Err() != nil {
				return g, err
			}
			select {
			case <-ctx.Done():
			case <-t.C:
				driver.Woke(ctx, driver.WakeTimer)
			}
		}
	case b.kind == "no-writer-preference" && !req.Shared:
		for {
			g, err := b.TryAcquire(ctx, req)
			if err == nil || ctx.Err() != nil {
				return g, err
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
	case b.kind == "no-exclusion", b.kind == "constant-tokens", b.kind == "readers-ignore-writers" && req.Shared:
		return b.TryAcquire(ctx, req)
	}
	g, err := b.Driver.Acquire(ctx, b.shaped(req))
	return b.stallToken(req, g, err)
}

func (b *broken) Release(ctx context.Context, req *driver.Request) error {
	if b.kind == "no-owner-check" {
		// The classic bug: a plain delete, whoever holds the key.
		b.Driver.Delete(req.Key)
		return nil
	}
	return b.Driver.Release(ctx, b.apart(req))
}

func (b *broken) Inspect(ctx context.Context, key string) (driver.Info, error) {
	in, err := b.Driver.Inspect(ctx, key)
	if b.kind == "inspect-stale" {
		in.Token = 1
		for i := range in.Holders {
			in.Holders[i].Token, in.Holders[i].Label = 1, ""
		}
	}
	return in, err
}

func (b *broken) ForceRelease(ctx context.Context, key string) (int, error) {
	if b.kind == "force-release-silent" {
		b.Driver.Delete(key)
		return 1, nil
	}
	return b.Driver.ForceRelease(ctx, key)
}

func (b *broken) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if b.kind == "watch-silent" {
		c := make(chan struct{})
		context.AfterFunc(ctx, func() { close(c) })
		return c, nil
	}
	return b.Driver.Watch(ctx, key)
}

func (b *broken) Refresh(ctx context.Context, req *driver.Request) error {
	if b.kind == "never-lost" || b.kind == "no-owner-check" {
		return nil
	}
	err := b.Driver.Refresh(ctx, b.apart(req))
	if b.kind == "wrong-cause" && errors.Is(err, driver.ErrNotHeld) {
		// Every loss blamed on another owner, whatever happened.
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrTakenOver)
	}
	return err
}

// brokenSets are broken ways of taking a set of keys, one per kind; the
// driver under them is sound.
var brokenSets = map[string]func(ctx context.Context, lk *lock.Locker, keys []string, try bool) (conformance.LockSet, error){
	"set-in-given-order": func(ctx context.Context, lk *lock.Locker, keys []string, try bool) (conformance.LockSet, error) {
		return takeEach(ctx, lk, keys, try, true, meetAfterFirstKey)
	},
	"set-keeps-partial": func(ctx context.Context, lk *lock.Locker, keys []string, try bool) (conformance.LockSet, error) {
		return takeEach(ctx, lk, slices.Sorted(slices.Values(keys)), try, false, nil)
	},
	"set-blind-to-loss": func(ctx context.Context, lk *lock.Locker, keys []string, try bool) (conformance.LockSet, error) {
		s, err := takeEach(ctx, lk, slices.Sorted(slices.Values(keys)), try, true, nil)
		if err != nil {
			return nil, err
		}
		return blindSet{s}, nil
	},
}

// firstKeys counts, for set-in-given-order, the sets that took their first key.
var firstKeys atomic.Int32

// meetAfterFirstKey holds a set that took its first key until another set
// has taken its own (up to a second), so that two sets named in opposite
// orders each hold what the other waits for: the deadlock then happens on a
// machine of any speed, not only when the scheduler interleaves them.
func meetAfterFirstKey() {
	firstKeys.Add(1)
	for deadline := time.Now().Add(time.Second); firstKeys.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// takeEach takes keys one by one in the order given, calling afterFirst (if
// not nil) once the first is taken; on a failure it gives back what it took
// only if giveBack.
func takeEach(ctx context.Context, lk *lock.Locker, keys []string, try, giveBack bool, afterFirst func()) (*eachSet, error) {
	s := &eachSet{released: make(chan struct{})}
	for i, k := range keys {
		if i == 1 && afterFirst != nil {
			afterFirst()
		}
		var (
			l   *lock.Lock
			err error
		)
		if try {
			l, err = lk.TryAcquire(ctx, k)
		} else {
			l, err = lk.Acquire(ctx, k)
		}
		if err != nil {
			if giveBack {
				_ = s.Release(context.WithoutCancel(ctx))
			}
			return nil, err
		}
		s.keys, s.locks = append(s.keys, k), append(s.locks, l)
	}
	return s, nil
}

// eachSet is a set of locks taken one by one, as a broken AcquireAll would.
type eachSet struct {
	keys     []string
	locks    []*lock.Lock
	released chan struct{} // ends Lost's goroutine
	once     sync.Once
}

func (s *eachSet) Keys() []string { return s.keys }
func (s *eachSet) Lock(key string) *lock.Lock {
	if i := slices.Index(s.keys, key); i >= 0 {
		return s.locks[i]
	}
	return nil
}

func (s *eachSet) Lost() <-chan struct{} {
	c := make(chan struct{})
	go func() {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.released)}}
		for _, l := range s.locks {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.Lost())})
		}
		if i, _, _ := reflect.Select(cases); i > 0 {
			close(c)
		}
	}()
	return c
}

func (s *eachSet) Err() error {
	for _, l := range s.locks {
		if err := l.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (s *eachSet) Release(ctx context.Context) error {
	s.once.Do(func() { close(s.released) })
	var errs []error
	for _, l := range s.locks {
		if err := l.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// blindSet never reports a member's loss.
type blindSet struct{ *eachSet }

func (blindSet) Lost() <-chan struct{} { return make(chan struct{}) }
func (blindSet) Err() error            { return nil }
