package run

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/distlock/lock/soak/check"
)

// A multi-process soak on flock files: client processes (this test binary,
// see TestMain) are frozen and killed and replaced, every kill is in the
// history, and a correct backend shows no violation.
func TestProcessSoakRecordsKillsAndFindsNoViolationOnFiles(t *testing.T) {
	dir := t.TempDir()
	p := Processes{Name: "file", URL: "file://" + dir, Command: []string{os.Args[0]}, Clients: 4, Keys: 2,
		TTL: 200 * time.Millisecond, Duration: 4 * time.Second, Seed: 7, Out: t.TempDir()}
	sum, err := p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range sum.Violations {
		t.Errorf("violation: %s", v)
	}
	if sum.Ops[string(check.Write)] == 0 || sum.Ops[string(check.Read)] == 0 {
		t.Fatalf("no fenced read or write: %v", sum.Ops)
	}
	if sum.Faults["client-kill"] != sum.Ops[string(check.Crash)] {
		t.Errorf("%d kills but %d crashes recorded", sum.Faults["client-kill"], sum.Ops[string(check.Crash)])
	}
	if sum.Faults["client-kill"]+sum.Faults["client-freeze"] == 0 {
		t.Errorf("no client fault in %v", sum.Faults)
	}
	t.Logf("%v ops, %v faults", sum.Ops, sum.Faults)
}
