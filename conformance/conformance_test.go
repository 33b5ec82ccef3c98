package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"

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
			run:    "ReleaseAndRefreshCheckTheOwner|ReleaseByExpiredHolderKeepsNewOwnersLock|ReleaseBySeveredHolderKeepsNewOwnersLock",
			fail:   []string{"ReleaseAndRefreshCheckTheOwner", "ReleaseByExpiredHolderKeepsNewOwnersLock", "ReleaseBySeveredHolderKeepsNewOwnersLock"},
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
			broken: "never-lost",
			run:    "LostClosesWhenSessionSevered|DoCancelsFnAndReportsErrLostOnLoss",
			fail:   []string{"LostClosesWhenSessionSevered", "DoCancelsFnAndReportsErrLostOnLoss"},
		},
		{
			broken: "no-exclusion",
			run:    "MutualExclusionUnderContention|TryAcquireReportsLockedWhileHeld",
			fail:   []string{"MutualExclusionUnderContention", "TryAcquireReportsLockedWhileHeld"},
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
	conformance.Run(t, conformance.Harness{
		NewDriver: func(context.Context) (driver.Driver, error) {
			return &broken{Driver: memdriver.New("broken-" + kind), kind: kind}, nil
		},
		Sever: func(_ context.Context, d driver.Driver) error {
			d.(*broken).Sever()
			return nil
		},
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
}

func (b *broken) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if b.kind == "no-exclusion" {
		return driver.Grant{Token: 1}, nil
	}
	g, err := b.Driver.TryAcquire(ctx, req)
	if b.kind == "constant-tokens" && err == nil {
		g.Token = 1
	}
	return g, err
}

func (b *broken) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	switch b.kind {
	case "slow-poller":
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
	case "no-exclusion", "constant-tokens":
		return b.TryAcquire(ctx, req)
	}
	return b.Driver.Acquire(ctx, req)
}

func (b *broken) Release(ctx context.Context, req *driver.Request) error {
	if b.kind == "no-owner-check" {
		// The classic bug: a plain delete, whoever holds the key.
		b.Driver.Delete(req.Key)
		return nil
	}
	return b.Driver.Release(ctx, req)
}

func (b *broken) Refresh(ctx context.Context, req *driver.Request) error {
	if b.kind == "never-lost" || b.kind == "no-owner-check" {
		return nil
	}
	return b.Driver.Refresh(ctx, req)
}
