// Package conformance is the suite every distlock driver runs. It checks, through
// the portable layer (lock.New over the driver), the contract of
// docs/ARCHITECTURE.md:
// mutual exclusion, owner-checked release and refresh, fencing, the Lost signal,
// prompt wake-up, cancellation without residue, key distinctness, input
// validation and Close. A driver author proves a driver with one test:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{
//			NewDriver: func(ctx context.Context) (driver.Driver, error) { return mydriver.Open(ctx, url) },
//			Sever:     func(ctx context.Context, d driver.Driver) error { return killSession(ctx, d) },
//		})
//	}
//
// Properties a driver declares it lacks (Capabilities) are skipped with the reason;
// nothing is passed silently. Every property uses a fresh key and fresh clients,
// checks that no goroutine outlives it, and fails instead of hanging.
//
// # Faults
//
// The fault properties need optional hooks of the Harness and are skipped, naming
// the hook, without them: a silent partition of one client (a TCP
// proxy in front of Servers, reached through NewDriverThrough), a frozen server
// (Freeze, Thaw), restarts with and without the locks (RestartBackend,
// RestartLosingLocks), and holder processes that are frozen or killed (URL, with
// HolderMain called from TestMain). They log what they measure as lines
//
//	figure <what> <backend> <duration>
//
// (partition-margin: from the cut-off holder's Lost to another client's grant;
// writer-wait-under-reader-stream: the longest wait of a writer while readers
// keep arriving; stopped-permit-holders-superseded-after: until other clients
// hold the permits of a crashed holder and of one that stopped refreshing;
// restart-loss-detection: from the backend answering again to Lost;
// frozen-holder-superseded-after and killed-holder-superseded-after: until
// another client holds the lock; open-frozen and close-frozen;
// try-acquire-frozen: one TryAcquire without a deadline, bounded by
// Harness.AttemptBound). Each takes a few
// seconds with the default one-second TTL, except
// OpenAndCloseHaveDefaultBoundsAgainstFrozenServer, which may take the default
// Open bound of ten seconds; a quick run leaves it out.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// Harness connects the suite to a backend.
type Harness struct {
	// NewDriver opens a new client of the backend, independent of every other
	// client as a separate process's would be (its own connection or session).
	// The suite closes it.
	NewDriver func(ctx context.Context) (driver.Driver, error)

	// Sever makes the backend forget every lock the client d holds, as it does when
	// d's session ends (CLIENT KILL, pg_terminate_backend, lease revoke, session
	// expiry), while d's process lives on and must notice. Required.
	Sever func(ctx context.Context, d driver.Driver) error

	// SeverCause is the loss cause the driver's package documents for what
	// Sever does (lock.ErrSessionExpired for an ended session,
	// lock.ErrExpired for a key or lease gone as if it expired,
	// lock.ErrTakenOver...): Lock.Err and Do's context.Cause must match it
	// after Sever, besides ErrLost. Drivers differ because their backends
	// show a loss differently. Nil only for a driver that cannot tell why a
	// lock went; the properties then check ErrLost alone.
	SeverCause error

	// CauseMayExpireFirst says that after Sever, RestartLosingLocks or a
	// partition the lock's validity deadline may pass before the driver hears
	// why the lock went (a ZooKeeper client learns that its session expired
	// only once it reconnects, up to a second later, while its refreshes
	// cannot be confirmed): lock.ErrExpired is then accepted besides SeverCause,
	// RestartCause and PartitionCause.
	CauseMayExpireFirst bool

	// PartitionCause is the loss cause Lock.Err must match when the holder
	// heard nothing from the backend past the lock's validity: cut off by a
	// silent partition (PartitionedHolderLearnsOfLossBeforeAnotherClientAcquires)
	// or with the server frozen (StalledServerNeverGrantsAnExpiredLockNorTwoHolders).
	// It is what the driver documents for silence: lock.ErrExpired where no
	// refresh is confirmed before the validity deadline, lock.ErrSessionExpired
	// where the driver gives up a session that does not answer first (with
	// CauseMayExpireFirst, lock.ErrExpired is accepted besides). Nil only for
	// a driver that cannot tell: the properties then check ErrLost alone.
	PartitionCause error

	// RestartBackend restarts the backend server, keeping whatever data it
	// persists. Optional: when nil, the properties that need it are skipped with
	// that reason.
	RestartBackend func(ctx context.Context) error

	// TTL is the lock TTL used by properties that wait for expiry or loss. Zero
	// means one second, raised to the driver's MinTTL.
	TTL time.Duration

	// Options are given to every Locker the suite makes.
	Options []lock.Option

	// The fault hooks below are optional. The fault properties that need a hook
	// the harness leaves nil are skipped, naming it.

	// Name names the backend in the figures the fault properties measure and log
	// ("figure partition-margin redis 41ms"). Empty: the driver's package name.
	Name string

	// URL is what lock.Open takes to reach the same backend as NewDriver. The
	// suite opens Lockers from it in holder processes (the test binary started
	// again, see HolderMain) and to check the bounds of Open and Close.
	URL string

	// Servers are the addresses (host:port) that clients of NewDriver connect to,
	// one per server. NewDriverThrough opens a client like NewDriver that
	// connects to addrs[i] wherever it would connect to Servers[i]. The suite
	// puts a fault-injecting TCP proxy at each addrs[i] to cut that one client off
	// silently (a partition), reset its connections or slow them down.
	Servers          []string
	NewDriverThrough func(ctx context.Context, addrs []string) (driver.Driver, error)

	// Freeze stops every process of every server of the backend (SIGSTOP of the
	// whole process group: PostgreSQL runs a process per connection), so that it
	// keeps its connections open and answers nothing, like a stalled machine,
	// until Thaw continues them (SIGCONT).
	Freeze func(ctx context.Context) error
	Thaw   func(ctx context.Context) error

	// RestartLosingLocks restarts the backend so that it comes back without any
	// lock it held: without its data where locks are data (Redis without
	// persistence, a replaced etcd or ZooKeeper machine), simply restarted where
	// locks live in sessions (PostgreSQL). It returns once the backend answers.
	RestartLosingLocks func(ctx context.Context) error

	// RestartCause is the loss cause Lock.Err must match after
	// RestartLosingLocks, as the driver documents it (lock.ErrServerChanged
	// where the driver sees the server's identity change,
	// lock.ErrSessionExpired where the restart ends its session). Nil only
	// for a driver that cannot tell: the property then checks ErrLost alone.
	RestartCause error

	// RestartLosesTokens says that RestartLosingLocks also wipes what the
	// driver's fencing tokens count from (etcd's revision and ZooKeeper's zxid
	// start over on a server replaced without its data). The design promises
	// increasing tokens only where the backend keeps its data, so
	// TokensIncreaseAcrossRestartLosingLocks is skipped with that reason; the
	// restart that keeps data is TokensIncreaseAcrossBackendRestart's.
	RestartLosesTokens bool

	// MixedPermits, when not empty, says why the driver may grant a semaphore
	// of another number of permits than the one in use on the key (it does
	// not always see it, as its package doc states): the property
	// PermitsOfAnotherNumberAreInvalidWhileTheSemaphoreIsInUse is then skipped
	// with that reason. The driver contract (driver.Request.Permits) asks
	// for ErrInvalidArgument; an entry here is a known gap, not a choice.
	MixedPermits string

	// MixedShapes likewise says why the driver may grant a key in one shape
	// while another holds it (a semaphore's permits beside an exclusive or
	// shared lock): AKeyInUseInOneShapeIsNotGrantedInAnother is skipped with
	// that reason.
	MixedShapes string

	// SessionTimeout is how long the backend keeps the locks of a client that
	// vanished without a word (its process killed or cut off): ZooKeeper's
	// session timeout. Zero when the backend frees them as soon as the
	// connection drops (PostgreSQL, files) or when the TTL bounds it (expiring
	// backends).
	SessionTimeout time.Duration

	// AttemptBound is how long one TryAcquire may take, by the driver's
	// documentation, against a server that accepts connections and answers
	// nothing, when the caller's context has no deadline (for example the
	// client's read timeout). TryAcquireWithoutDeadlineIsBoundedAgainstFrozenServer
	// checks it (with Freeze), and is skipped, saying so, when it is zero.
	AttemptBound time.Duration
}

// Bounds the suite asserts. They are generous for slow CI machines under the race
// detector, yet far below what a polling or hung implementation produces.
const (
	// WakeBound is the median time from a release to a blocked waiter holding the
	// lock, on drivers that declare Notify.
	WakeBound = 100 * time.Millisecond
	// pollWakeBound is the same for drivers that poll, run with pollBackoff.
	pollWakeBound = 150 * time.Millisecond
	// propertyTimeout ends a property that hangs.
	propertyTimeout = 2 * time.Minute
)

var pollBackoff = lock.Backoff{Min: time.Millisecond, Max: 20 * time.Millisecond}

// Run runs every property against the harness's driver, each as a subtest named by
// the property it checks.
func Run(t *testing.T, h Harness) {
	if h.NewDriver == nil || h.Sever == nil {
		t.Fatal("conformance: Harness.NewDriver and Harness.Sever are required")
	}
	run := func(name string, property func(*env)) {
		t.Run(name, func(t *testing.T) { runProperty(t, h, property) })
	}

	// Exclusion and waiting.
	run("MutualExclusionUnderContention", testMutualExclusionUnderContention)
	run("TryAcquireReportsLockedWhileHeld", testTryAcquireReportsLockedWhileHeld)
	run("AcquireWaitsForRelease", testAcquireWaitsForRelease)
	run("BlockedWaiterWakesPromptlyOnRelease", testBlockedWaiterWakesPromptlyOnRelease)
	run("AHandoffWakesTheWaiterByNotification", testAHandoffWakesTheWaiterByNotification)
	run("DistinctKeysAreDistinctLocks", testDistinctKeysAreDistinctLocks)
	run("IndependentKeysDoNotBlockEachOther", testIndependentKeysDoNotBlockEachOther)
	run("ManyHeldLocksNeedNoGoroutineEach", testManyHeldLocksNeedNoGoroutineEach)
	run("WaitersAreGrantedInArrivalOrder", testWaitersAreGrantedInArrivalOrder)
	run("SharedHoldersExcludeWriters", testSharedHoldersExcludeWriters)

	// Read-write locks and semaphores (shared.go, permits.go, shapes.go): each
	// needs the shape in Capabilities, and is skipped naming it otherwise.
	run("SharedHoldersRunTogether", testSharedHoldersRunTogether)
	run("ExclusiveAndSharedExcludeEachOther", testExclusiveAndSharedExcludeEachOther)
	run("WriterIsNotStarvedByAStreamOfReaders", testWriterIsNotStarvedByAStreamOfReaders)
	run("PermitsAdmitNHoldersAndNoMore", testPermitsAdmitNHoldersAndNoMore)
	run("PermitHoldersNeverExceedNUnderContention", testPermitHoldersNeverExceedNUnderContention)
	run("StoppedPermitHoldersFreeTheirPermitsWithinTTL", testStoppedPermitHoldersFreeTheirPermitsWithinTTL)
	run("OnePermitIsTheExclusiveLock", testOnePermitIsTheExclusiveLock)
	run("PermitsOfAnotherNumberAreInvalidWhileTheSemaphoreIsInUse", testPermitsOfAnotherNumberAreInvalidWhileTheSemaphoreIsInUse)
	run("AKeyInUseInOneShapeIsNotGrantedInAnother", testAKeyInUseInOneShapeIsNotGrantedInAnother)

	// Several keys at once.
	run("SetsNamedInOppositeOrdersNeverDeadlockNorOverlap", testSetsNamedInOppositeOrdersNeverDeadlockNorOverlap)
	run("TryAcquireAllWithOneHeldKeyLeavesNoneHeld", testTryAcquireAllWithOneHeldKeyLeavesNoneHeld)
	run("AcquireAllEndedMidwayLeavesNothingHeld", testAcquireAllEndedMidwayLeavesNothingHeld)
	run("LostMemberClosesTheSetsLostNamingItsKey", testLostMemberClosesTheSetsLostNamingItsKey)
	run("SetMemberTokensIncreaseAsForSingleLocks", testSetMemberTokensIncreaseAsForSingleLocks)
	run("TokensIncreaseAcrossSharedExclusiveAndPermitGrants", testTokensIncreaseAcrossSharedExclusiveAndPermitGrants)
	run("StaleSharedAndPermitHoldersCannotFreeOthers", testStaleSharedAndPermitHoldersCannotFreeOthers)
	run("SharedAndPermitHoldersSeeLostAndAreReleasedByClose", testSharedAndPermitHoldersSeeLostAndAreReleasedByClose)

	// Inspection, operator calls and leader election (inspect.go, elect.go):
	// those that need an optional driver interface (Inspector, Lister,
	// Evictor, Labeler) are skipped naming it.
	run("InspectAgreesWithHolders", testInspectAgreesWithHolders)
	run("ListShowsHeldKeysUnderAPrefix", testListShowsHeldKeysUnderAPrefix)
	run("ForceReleaseEvictsAndFences", testForceReleaseEvictsAndFences)
	run("ExactlyOneLeaderAmongCampaigners", testExactlyOneLeaderAmongCampaigners)
	run("ResignHandsOverPromptly", testResignHandsOverPromptly)
	run("LeaderReportsValueTermAndStart", testLeaderReportsValueTermAndStart)
	run("ObserveSeesEveryChangeInOrder", testObserveSeesEveryChangeInOrder)
	run("KilledLeaderProcessIsReplaced", testKilledLeaderProcessIsReplaced)
	run("FrozenLeaderProcessIsReplacedOnlyAfterItsValidity", testFrozenLeaderProcessIsReplacedOnlyAfterItsValidity)

	// Ownership.
	run("RetriedAcquireBySameOwnerSucceeds", testRetriedAcquireBySameOwnerSucceeds)
	run("ReleaseAndRefreshCheckTheOwner", testReleaseAndRefreshCheckTheOwner)
	run("ReleaseByExpiredHolderKeepsNewOwnersLock", testReleaseByExpiredHolderKeepsNewOwnersLock)
	run("ReleaseBySeveredHolderKeepsNewOwnersLock", testReleaseBySeveredHolderKeepsNewOwnersLock)
	run("RefreshByStaleHolderFailsAndKeepsNewOwnersLock", testRefreshByStaleHolderFails)
	run("ReleaseTwiceIsSafe", testReleaseTwiceIsSafe)

	// Fencing.
	run("TokensIncreaseAcrossHolders", testTokensIncreaseAcrossHolders)
	run("TokensIncreaseAcrossExpiry", testTokensIncreaseAcrossExpiry)
	run("TokensIncreaseAcrossClientRestart", testTokensIncreaseAcrossClientRestart)
	run("TokensIncreaseAcrossBackendRestart", testTokensIncreaseAcrossBackendRestart)
	run("TokenWithoutFencingIsAnError", testTokenWithoutFencingIsAnError)

	// Liveness and the Lost signal.
	run("AutoRefreshKeepsLockPastTTL", testAutoRefreshKeepsLockPastTTL)
	run("LostClosesAtDeadlineBeforeOthersAcquire", testLostClosesAtDeadlineBeforeOthersAcquire)
	run("LostClosesWhenSessionSevered", testLostClosesWhenSessionSevered)
	run("CrashedHolderStopsBlockingOthers", testCrashedHolderStopsBlockingOthers)
	run("DoCancelsFnAndReportsErrLostOnLoss", testDoCancelsFnAndReportsErrLostOnLoss)
	run("DoRunsFnUnderLockAndReleases", testDoRunsFnUnderLockAndReleases)

	// Cancellation, input, lifecycle.
	run("CancelledAcquireReturnsPromptlyAndLeavesNothing", testCancelledAcquireLeavesNothing)
	run("InvalidKeysAreRejectedAndChangeNothing", testInvalidKeysAreRejected)
	run("BadOptionsAreRejected", testBadOptionsAreRejected)
	run("CloseReleasesLocksAndRejectsLaterCalls", testCloseReleasesLocksAndRejectsLaterCalls)

	// TTL range, on every driver.
	run("TTLsOutsideTheDriversRangeAreRejectedAndChangeNothing", testTTLsOutsideRangeAreRejected)
	run("CapabilitiesStateTheTTLRangeAcquireAccepts", testCapabilitiesStateTheTTLRangeAcquireAccepts)

	// Faults (faults.go): each needs a hook of the Harness, and is skipped
	// naming it when the hook is nil.
	run("PartitionedHolderLearnsOfLossBeforeAnotherClientAcquires", testPartitionedHolderLearnsOfLossFirst)
	run("StalledServerNeverGrantsAnExpiredLockNorTwoHolders", testStalledServerNeverGrantsExpiredLock)
	run("LostClosesPromptlyWhenBackendRestartsWithoutLocks", testLostClosesPromptlyOnRestartLosingLocks)
	run("LockTakenAfterBackendRestartIsNotReportedLost", testLockTakenAfterRestartIsNotReportedLost)
	run("TokensIncreaseAcrossBackendRestartLosingLocks", testTokensIncreaseAcrossRestartLosingLocks)
	run("FrozenHolderProcessIsSupersededOnlyAfterItsValidity", testFrozenHolderProcessIsSupersededAfterValidity)
	run("KilledHolderProcessStopsBlockingOthers", testKilledHolderProcessStopsBlockingOthers)
	run("EveryCallHonoursItsContextAgainstFrozenServer", testEveryCallHonoursContextAgainstFrozenServer)
	run("OpenAndCloseHonourTheirTimeoutsAgainstFrozenServer", testOpenAndCloseHonourTimeoutsAgainstFrozenServer)
	run("OpenAndCloseHaveDefaultBoundsAgainstFrozenServer", testOpenAndCloseHaveDefaultBoundsAgainstFrozenServer)
	run("OpenFailsFastWhenEveryServerRefuses", testOpenFailsFastWhenEveryServerRefuses)
	run("TryAcquireWithoutDeadlineIsBoundedAgainstFrozenServer", testTryAcquireWithoutDeadlineIsBounded)
	run("WaiterSurvivesBackendRestartShorterThanItsContext", testWaiterSurvivesBackendRestart)
}

// env is what a property gets: the harness, a context bounded by the property
// timeout, a unique key and the driver's capabilities.
type env struct {
	*testing.T
	h    Harness
	ctx  context.Context
	key  string
	ttl  time.Duration
	caps driver.Capabilities

	driverPkg string // package name of the driver's type, for figures

	// before lists the goroutines that the leak check at the end takes as given.
	before leakcheck.Option
}

// acceptGoroutines takes the goroutines running now as given by the leak check:
// for harness infrastructure (a restarted server's process waiter) that
// legitimately outlives a property.
func (e *env) acceptGoroutines() { e.before = leakcheck.IgnoreCurrent() }

// leakPatience is how long the leak check waits for goroutines that are on
// their way out (leakcheck alone waits a second): a backend client's
// Close may return before its transport goroutines have ended (gRPC ends them
// asynchronously), which on a loaded machine takes longer. A goroutine still
// there after that is a leak.
const leakPatience = 5 * time.Second

// verifyNoLeak fails t if goroutines other than the given ones are still
// running after leakPatience.
func verifyNoLeak(t *testing.T, given leakcheck.Option) {
	t.Helper()
	deadline := time.Now().Add(leakPatience)
	for {
		err := leakcheck.Find(given)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Error(err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runProperty(t *testing.T, h Harness, property func(*env)) {
	// Registered first, so it runs after every client is closed. The goroutines
	// running now (the test framework's, shared test servers') are taken as given.
	e := &env{T: t, h: h, before: leakcheck.IgnoreCurrent()}
	t.Cleanup(func() { verifyNoLeak(t, e.before) })

	ctx, cancel := context.WithTimeout(context.Background(), propertyTimeout)
	t.Cleanup(cancel)
	name := t.Name()
	watchdog := time.AfterFunc(propertyTimeout+30*time.Second, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "conformance: %s hung; goroutines:\n%s\n", name, buf[:n])
		panic("conformance: " + name + " hung")
	})
	t.Cleanup(func() { watchdog.Stop() })

	probe, err := h.NewDriver(ctx)
	if err != nil {
		t.Fatalf("Harness.NewDriver: %v", err)
	}
	caps := probe.Capabilities()
	e.driverPkg = driverPackage(probe)
	if err := probe.Close(); err != nil {
		t.Fatalf("closing a fresh driver: %v", err)
	}
	ttl := h.TTL
	if ttl == 0 {
		ttl = time.Second
	}
	if ttl < caps.MinTTL {
		ttl = caps.MinTTL
	}
	e.ctx, e.key, e.ttl, e.caps = ctx, uniqueKey(t), ttl, caps
	property(e)
}

func uniqueKey(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := t.Name()
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return "conformance:" + name + ":" + hex.EncodeToString(b[:])
}

// client opens a new independent client and wraps it in a Locker, closed at the
// end of the property.
func (e *env) client(opts ...lock.Option) *lock.Locker {
	lk, _ := e.clientAndDriver(opts...)
	return lk
}

func (e *env) clientAndDriver(opts ...lock.Option) (*lock.Locker, driver.Driver) {
	e.Helper()
	d, err := e.h.NewDriver(e.ctx)
	if err != nil {
		e.Fatalf("Harness.NewDriver: %v", err)
	}
	return e.locker(d, opts...), d
}

// locker wraps d in a Locker with the suite's options, closed at the end of the
// property.
func (e *env) locker(d driver.Driver, opts ...lock.Option) *lock.Locker {
	all := append([]lock.Option{lock.WithTTL(e.ttl)}, e.h.Options...)
	if !e.caps.Notify {
		all = append(all, lock.WithBackoff(pollBackoff))
	}
	lk := lock.New(d, append(all, opts...)...)
	e.Cleanup(func() {
		if err := lk.Close(); err != nil {
			e.Errorf("Close: %v", err)
		}
	})
	return lk
}

func (e *env) acquire(lk *lock.Locker, key string, opts ...lock.Option) *lock.Lock {
	e.Helper()
	l, err := lk.Acquire(e.ctx, key, opts...)
	if err != nil {
		e.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

func (e *env) release(l *lock.Lock) {
	e.Helper()
	if err := l.Release(e.ctx); err != nil {
		e.Fatalf("Release(%q): %v", l.Key(), err)
	}
}

// requireLocked asserts that lk cannot take key now.
func (e *env) requireLocked(lk *lock.Locker, key, why string) {
	e.Helper()
	l, err := lk.TryAcquire(e.ctx, key)
	if err == nil {
		_ = l.Release(e.ctx)
		e.Fatalf("TryAcquire(%q) succeeded, want ErrLocked: %s", key, why)
	}
	if !isErr(err, lock.ErrLocked) {
		e.Fatalf("TryAcquire(%q) = %v, want ErrLocked: %s", key, err, why)
	}
}

// waitClosed waits for ch to close within bound and returns how long it took.
func (e *env) waitClosed(ch <-chan struct{}, bound time.Duration, what string) time.Duration {
	e.Helper()
	start := time.Now()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-ch:
		return time.Since(start)
	case <-t.C:
		e.Fatalf("%s: not within %v", what, bound)
	case <-e.ctx.Done():
		e.Fatalf("%s: property timed out", what)
	}
	return 0
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (e *env) needFencing() {
	if !e.caps.Fencing {
		e.Skip("driver declares no fencing (Capabilities.Fencing is false); TokenWithoutFencingIsAnError checks Token refuses")
	}
}

func (e *env) token(l *lock.Lock) uint64 {
	e.Helper()
	tok := l.Token()
	if tok == 0 {
		e.Fatalf("Token() = 0 on a fencing driver; tokens start at 1")
	}
	return tok
}

func isErr(err, target error) bool { return errors.Is(err, target) }
