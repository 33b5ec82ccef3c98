package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestRunOnSeveralKeysGivesTheCommandEveryKeyAndToken(t *testing.T) {
	u := fileURL(t.TempDir())
	// An outer distlock's single-key variables must not reach a set's command.
	env := testEnv("DISTLOCK_KEY=outer", "DISTLOCK_TOKEN=7")
	script := `printf '%s|%s|%s|%s' "$DISTLOCK_KEYS" "$DISTLOCK_TOKENS" "${DISTLOCK_KEY-unset}" "${DISTLOCK_TOKEN-unset}"`
	var last [2]uint64
	for i := 0; i < 2; i++ {
		// Named in another order each time: the set is the same.
		args := []string{"run", "--url", u, "transfer:b", "transfer:a", "--", "sh", "-c", script}
		if i == 1 {
			args = []string{"run", "--url", u, "--key", "transfer:a", "--key", "transfer:b", "sh", "-c", script}
		}
		out, stderr, status := runDistlock(t, env, args...)
		expectStatus(t, status, 0, stderr)
		f := strings.Split(strings.TrimSuffix(out, "\n"), "|")
		if len(f) != 4 || f[0] != "transfer:a\ntransfer:b" || f[2] != "unset" || f[3] != "unset" {
			t.Fatalf("run %d: DISTLOCK_KEYS|DISTLOCK_TOKENS|DISTLOCK_KEY|DISTLOCK_TOKEN = %q", i, out)
		}
		toks := strings.Fields(f[1])
		if len(toks) != 2 {
			t.Fatalf("run %d: DISTLOCK_TOKENS=%q, want a token per key", i, f[1])
		}
		for j, tok := range toks {
			n, err := strconv.ParseUint(tok, 10, 64)
			if err != nil || n <= last[j] {
				t.Fatalf("run %d: token of key %d is %q after %d", i, j, tok, last[j])
			}
			last[j] = n
		}
	}
}

func TestRunsNamingOverlappingKeysInOppositeOrdersNeverDeadlockNorOverlap(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	script := `echo "start $$" >> "$LOG"; sleep 0.02; echo "end $$" >> "$LOG"`
	const runs = 6
	procs := make([]*proc, runs)
	for i := range procs {
		keys := []string{"acct:1", "acct:2"}
		if i%2 == 1 {
			keys = []string{"acct:2", "acct:1"}
		}
		// --wait bounds a deadlock: a run stuck behind the other would exit 75.
		args := append([]string{"run", "--url", fileURL(dir), "--wait", "15s"}, keys...)
		procs[i] = start(t, testEnv("LOG="+logPath), append(args, "--", "sh", "-c", script)...)
	}
	runsInTurn(t, procs, logPath)
}

func TestHeldMemberStopsASetWithNoWaitNamingItAndTakesNothing(t *testing.T) {
	dir := t.TempDir()
	u := fileURL(dir)
	holder := start(t, nil, "run", "--url", u, "b", "--", "sh", "-c", holdScript)
	holder.expectLine(holder.stdout, "ready")

	marker := filepath.Join(dir, "ran")
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--no-wait", "c", "a", "b", "--", "touch", marker)
	expectStatus(t, status, exitHeld, stderr)
	if !strings.Contains(stderr, `the lock "b" is held elsewhere`) {
		t.Errorf("stderr does not name the held member:\n%s", stderr)
	}
	if fileExists(marker) {
		t.Fatal("the command ran without every lock")
	}
	// All or nothing: the members the set could take are free again.
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--no-wait", "a", "c", "--", "true")
	expectStatus(t, status, 0, stderr)

	holder.stdin.Close()
	expectStatus(t, holder.wait(), 0, holder.stderrText())
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--no-wait", "a", "b", "c", "--", "touch", marker)
	expectStatus(t, status, 0, stderr)
	if !fileExists(marker) {
		t.Fatal("the command did not run once every key was free")
	}
}

func TestLostMemberTerminatesTheCommandNamingIt(t *testing.T) {
	dir := t.TempDir()
	u := fileURL(dir)
	script := `trap 'echo terminated; exit 0' TERM; echo ready; while :; do sleep 0.01; done`
	p := start(t, nil, "run", "--url", u, "--ttl", "300ms", "--grace", "200ms", "x", "y", "--", "sh", "-c", script)
	p.expectLine(p.stdout, "ready")
	_, stderr, status := runDistlock(t, nil, "release", "--force", "--url", u, "y")
	expectStatus(t, status, 0, stderr)
	p.expectLine(p.stdout, "terminated")
	expectStatus(t, p.wait(), exitLost, p.stderrText())
	if !strings.Contains(p.stderrText(), `lost the lock "y"`) {
		t.Errorf("stderr does not name the lost member:\n%s", p.stderrText())
	}
	// The member that was not lost was released with the set.
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--no-wait", "x", "--", "true")
	expectStatus(t, status, 0, stderr)
}

func TestBadSetUsageExits64(t *testing.T) {
	u := fileURL(t.TempDir())
	for _, args := range [][]string{
		{"run", "--url", u, "a", "b", "--"},
		{"run", "--url", u, "--key", "a"},
		{"run", "--url", u, "a", "b\nc", "--", "true"},
		{"run", "--url", u, "a", "", "--", "true"},
	} {
		_, stderr, status := runDistlock(t, nil, args...)
		if status != exitUsage {
			t.Errorf("distlock %q: exit status %d, want %d; stderr:\n%s", args, status, exitUsage, stderr)
		}
		expectShortUsageError(t, args, stderr)
	}
}
