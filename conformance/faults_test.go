package conformance_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
)

// netmemHarness serves a netmem backend for the test, with every fault hook.
func netmemHarness(t *testing.T) conformance.Harness {
	s, err := startNetmem()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return conformance.Harness{
		Name:      "netmem",
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return dialNetmem(ctx, s.addr) },
		Sever: func(_ context.Context, d driver.Driver) error {
			nd := d.(*netmemDriver)
			nd.mu.Lock()
			defer nd.mu.Unlock()
			s.mu.Lock()
			defer s.mu.Unlock()
			for r := range nd.held {
				if e, ok := s.locks[r.Key]; ok && e.Owner == r.Owner {
					delete(s.locks, r.Key)
				}
			}
			return nil
		},
		URL:     netmemScheme + "://" + s.addr,
		Servers: []string{s.addr},
		NewDriverThrough: func(ctx context.Context, addrs []string) (driver.Driver, error) {
			return dialNetmem(ctx, addrs[0])
		},
		Freeze:             func(context.Context) error { s.freeze(true); return nil },
		Thaw:               func(context.Context) error { s.freeze(false); return nil },
		RestartBackend:     func(context.Context) error { return s.restart(true) },
		RestartLosingLocks: func(context.Context) error { return s.restart(false) },
		// netmem tells no cause of its own but a restart's: a holder that
		// hears nothing loses its lock at the portable layer's deadline.
		PartitionCause: lock.ErrExpired,
		AttemptBound:   netmemAttemptBound,
	}
}

// The whole suite against a sound network backend: what fails here fails for
// the portable layer, not for a driver.
func TestSuiteOnNetmem(t *testing.T) {
	if os.Getenv(netmemBrokenEnv) != "" || os.Getenv(brokenEnv) != "" {
		t.Skip("inside a broken-driver child process")
	}
	conformance.Run(t, netmemHarness(t))
}

// TestBrokenNetmem runs the suite against a broken netmem; it only runs in the
// child process that TestFaultSuiteCatchesBrokenDrivers starts.
func TestBrokenNetmem(t *testing.T) {
	if os.Getenv(netmemBrokenEnv) == "" {
		t.Skip("runs only as a child of TestFaultSuiteCatchesBrokenDrivers")
	}
	conformance.Run(t, netmemHarness(t))
}

// Each fault property must fail against a backend that breaks what it checks.
func TestFaultSuiteCatchesBrokenDrivers(t *testing.T) {
	if os.Getenv(netmemBrokenEnv) != "" || os.Getenv(brokenEnv) != "" {
		t.Skip("inside a broken-driver child process")
	}
	for _, c := range []struct {
		broken string
		fail   []string
	}{
		// The server keeps locks for half their TTL: another client gets one
		// while its holder still trusts it.
		{"short-lease", []string{"PartitionedHolderLearnsOfLossBeforeAnotherClientAcquires", "FrozenHolderProcessIsSupersededOnlyAfterItsValidity"}},
		// Release deletes whoever holds the key. Caught once the portable
		// layer sends the Release of a lock past its validity deadline to the
		// backend (the new contract); before that, such a Release never
		// reaches the driver.
		{"no-owner-check", []string{"PartitionedHolderLearnsOfLossBeforeAnotherClientAcquires"}},
		// The driver reports every grant lost 10ms after it: a grant with no
		// validity left.
		{"early-loss", []string{"StalledServerNeverGrantsAnExpiredLockNorTwoHolders"}},
		{"no-exclusion", []string{"StalledServerNeverGrantsAnExpiredLockNorTwoHolders"}},
		// The driver never checks its locks after a reconnect, and refresh
		// always succeeds.
		{"never-lost", []string{"LostClosesPromptlyWhenBackendRestartsWithoutLocks"}},
		// The driver blames a server that does not answer on another owner:
		// the wrong cause for a partition or a frozen server.
		{"wrong-silence-cause", []string{"PartitionedHolderLearnsOfLossBeforeAnotherClientAcquires", "StalledServerNeverGrantsAnExpiredLockNorTwoHolders"}},
		// The driver compares a stale server id, as the Redis driver did.
		{"spurious-loss-after-restart", []string{"LockTakenAfterBackendRestartIsNotReportedLost"}},
		{"reset-counters", []string{"TokensIncreaseAcrossBackendRestartLosingLocks"}},
		// The driver waits for every reply, whatever the context.
		{"ignores-ctx", []string{"EveryCallHonoursItsContextAgainstFrozenServer", "OpenAndCloseHonourTheirTimeoutsAgainstFrozenServer"}},
		// Locks never expire: a killed or frozen holder blocks everyone.
		{"immortal", []string{"KilledHolderProcessStopsBlockingOthers", "FrozenHolderProcessIsSupersededOnlyAfterItsValidity"}},
		// TryAcquire waits for the server as long as its context allows.
		{"unbounded-attempt", []string{"TryAcquireWithoutDeadlineIsBoundedAgainstFrozenServer"}},
		// A refused dial is retried until the context ends, as etcd and
		// ZooKeeper did: Open fails only at its timeout.
		{"waits-on-refusal", []string{"OpenFailsFastWhenEveryServerRefuses"}},
		// A server that does not answer within 50ms is given up on: Open
		// fails before its timeout against a frozen server.
		{"gives-up-on-silence", []string{"OpenAndCloseHonourTheirTimeoutsAgainstFrozenServer"}},
		// Connection failures lose their class: the portable layer gives up.
		{"permanent-errors", []string{"WaiterSurvivesBackendRestartShorterThanItsContext"}},
	} {
		t.Run(c.broken, func(t *testing.T) {
			failed, out := runBroken(t, "TestBrokenNetmem", netmemBrokenEnv, c.broken, strings.Join(c.fail, "|"))
			for _, p := range c.fail {
				if !failed[p] {
					t.Errorf("property %s passed against the %s netmem; want it to fail\nchild output:\n%s", p, c.broken, out)
				}
			}
		})
	}
}
