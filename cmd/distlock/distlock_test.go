package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock/internal/testserver"
)

// holdScript prints "ready" once the command runs under the lock, then holds it
// until its standard input closes.
const holdScript = `echo ready; read line; echo done`

func TestRunsOnOneKeyNeverOverlap(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	// Each command logs its start and end around a pause, appending (O_APPEND) so
	// lines from concurrent commands could interleave but never tear. Any overlap
	// shows as two starts in a row.
	script := `echo "start $DISTLOCK_TOKEN" >> "$LOG"; sleep 0.05; echo "end $DISTLOCK_TOKEN" >> "$LOG"`
	const runs = 5
	procs := make([]*proc, runs)
	for i := range procs {
		procs[i] = start(t, testEnv("LOG="+logPath), "run", "--url", fileURL(dir), "job", "--", "sh", "-c", script)
	}
	var last uint64
	for _, tok := range runsInTurn(t, procs, logPath) {
		if tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		}
		last = tok
	}
}

func TestTokenAndKeyReachTheCommandAndTokenIncreases(t *testing.T) {
	u := fileURL(t.TempDir())
	var last uint64
	for i := 0; i < 2; i++ {
		out, stderr, status := runDistlock(t, nil, "run", "--url", u, "invoice:42", "--", "sh", "-c", `echo "$DISTLOCK_KEY $DISTLOCK_TOKEN"`)
		expectStatus(t, status, 0, stderr)
		key, tok, _ := strings.Cut(strings.TrimSpace(out), " ")
		if key != "invoice:42" {
			t.Fatalf("DISTLOCK_KEY=%q", key)
		}
		n, err := strconv.ParseUint(tok, 10, 64)
		if err != nil || n <= last {
			t.Fatalf("DISTLOCK_TOKEN=%q after %d", tok, last)
		}
		last = n
	}
}

func TestCommandExitStatusIsPropagated(t *testing.T) {
	u := fileURL(t.TempDir())
	for script, want := range map[string]int{
		"exit 0":      0,
		"exit 7":      7,
		"kill -9 $$":  128 + int(syscall.SIGKILL),
		"kill -15 $$": 128 + int(syscall.SIGTERM),
	} {
		_, stderr, status := runDistlock(t, nil, "run", "--url", u, "k", "--", "sh", "-c", script)
		if status != want {
			t.Errorf("%q: exit status %d, want %d; stderr:\n%s", script, status, want, stderr)
		}
	}
}

func TestHeldKeyGivesTempfailWithNoWaitOrExpiredWait(t *testing.T) {
	dir := t.TempDir()
	u := fileURL(dir)
	holder := start(t, nil, "run", "--url", u, "job", "--", "sh", "-c", holdScript)
	holder.expectLine(holder.stdout, "ready")

	marker := filepath.Join(dir, "ran")
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--no-wait", "job", "--", "touch", marker)
	expectStatus(t, status, exitHeld, stderr)
	if !strings.Contains(stderr, "held elsewhere") {
		t.Errorf("stderr does not say the lock is held elsewhere:\n%s", stderr)
	}
	begin := time.Now()
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--wait", "200ms", "job", "--", "touch", marker)
	expectStatus(t, status, exitHeld, stderr)
	if waited := time.Since(begin); waited < 200*time.Millisecond {
		t.Errorf("--wait 200ms gave up after %v", waited)
	}
	if fileExists(marker) {
		t.Fatal("the command ran without the lock")
	}

	holder.stdin.Close() // the holder's command finishes
	holder.expectLine(holder.stdout, "done")
	expectStatus(t, holder.wait(), 0, holder.stderrText())
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--no-wait", "job", "--", "touch", marker)
	expectStatus(t, status, 0, stderr)
	if !fileExists(marker) {
		t.Fatal("the command did not run once the lock was free")
	}
}

func TestSignalToDistlockReachesTheCommand(t *testing.T) {
	u := fileURL(t.TempDir())
	script := `trap 'echo got-TERM; exit 3' TERM; echo ready; while :; do sleep 0.01; done`
	p := start(t, nil, "run", "--url", u, "job", "--", "sh", "-c", script)
	p.expectLine(p.stdout, "ready")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.expectLine(p.stdout, "got-TERM")
	expectStatus(t, p.wait(), 3, p.stderrText())
	// The lock was released when the command exited.
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--no-wait", "job", "--", "true")
	expectStatus(t, status, 0, stderr)
}

func TestSignalWhileWaitingEndsTheWaitWithoutRunning(t *testing.T) {
	dir := t.TempDir()
	u := fileURL(dir)
	holder := start(t, nil, "run", "--url", u, "job", "--", "sh", "-c", holdScript)
	holder.expectLine(holder.stdout, "ready")
	marker := filepath.Join(dir, "ran")
	waiter := start(t, nil, "run", "--url", u, "--verbose", "job", "--", "touch", marker)
	waiter.expectLine(waiter.stderr, "waiting for the lock")
	if err := waiter.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, waiter.wait(), 128+int(syscall.SIGINT), waiter.stderrText())
	if fileExists(marker) {
		t.Fatal("the command ran although the wait was interrupted")
	}
}

func TestLostLockTerminatesTheCommand(t *testing.T) {
	for _, tc := range []struct {
		name, script string
	}{
		{"command exits on SIGTERM", `trap 'echo terminated; exit 0' TERM; echo ready; while :; do sleep 0.01; done`},
		{"command ignoring SIGTERM is killed after the grace", `trap 'echo terminated' TERM; echo ready; while :; do sleep 0.01; done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// --ttl must win over the URL's ttl, or the loss would go unnoticed
			// for an hour.
			p := start(t, nil, "run", "--url", fileURL(dir)+"?ttl=1h", "--ttl", "300ms", "--grace", "200ms", "job", "--", "sh", "-c", tc.script)
			p.expectLine(p.stdout, "ready")
			// An operator deletes the lock file: another process could now lock a
			// new one, so the holder's next check finds the lock lost.
			files, err := filepath.Glob(filepath.Join(dir, "*", "*.lock"))
			if err != nil || len(files) != 1 {
				t.Fatalf("lock files %v (%v), want one", files, err)
			}
			if err := os.Remove(files[0]); err != nil {
				t.Fatal(err)
			}
			p.expectLine(p.stdout, "terminated")
			expectStatus(t, p.wait(), exitLost, p.stderrText())
			if !strings.Contains(p.stderrText(), "lost the lock") {
				t.Errorf("stderr does not report the loss:\n%s", p.stderrText())
			}
		})
	}
}

func TestBadUsageExits64(t *testing.T) {
	u := fileURL(t.TempDir())
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"run"},
		{"run", "--url", u, "k"},
		{"run", "--url", u, "k", "--"},
		{"run", "--url", u, "--wait", "1s", "--no-wait", "k", "--", "true"},
		{"run", "--url", u, "--wait", "0s", "k", "--", "true"},
		{"run", "--url", u, "--ttl", "-1s", "k", "--", "true"},
		{"run", "--url", u, "--bogus", "k", "--", "true"},
		{"run", "--url", u, "", "--", "true"},
		{"run", "--url", "nosuch://host", "k", "--", "true"},
		{"run", "--url", "no-scheme", "k", "--", "true"},
		{"run", "--url", u, "--permits", "0", "k", "--", "true"},
		{"run", "--url", u, "--permits", "-2", "k", "--", "true"},
		{"run", "--url", u, "--shared", "--permits", "2", "k", "--", "true"},
		{"elect", "--url", u, "--bogus", "k", "--", "true"},
		{"status", "--url", u},
		{"status", "--bogus", "k"},
		{"list", "--url", u, "a", "b"},
		{"release", "--url", u, "k"},
		{"leader", "--url", u},
	} {
		_, stderr, status := runDistlock(t, nil, args...)
		if status != exitUsage {
			t.Errorf("distlock %q: exit status %d, want %d; stderr:\n%s", args, status, exitUsage, stderr)
		}
		expectShortUsageError(t, args, stderr)
	}
}

// expectShortUsageError checks that a usage error is the error and one line
// pointing to --help, not the whole usage text.
func expectShortUsageError(t *testing.T, args []string, stderr string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) > 2 || !strings.Contains(lines[len(lines)-1], "distlock --help") || strings.Contains(stderr, "Flags of run") {
		t.Errorf("distlock %q: want the error and one line pointing to --help; stderr:\n%s", args, stderr)
	}
}

func TestUnusableBackendExits69(t *testing.T) {
	_, stderr, status := runDistlock(t, nil, "run", "--url", "file:///dev/null/locks", "k", "--", "true")
	expectStatus(t, status, exitUnavailable, stderr)
}

func TestCommandThatCannotRunExits126Or127(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := fileURL(dir)
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "k", "--", filepath.Join(dir, "missing"))
	expectStatus(t, status, exitNotFound, stderr)
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "k", "--", notExec)
	expectStatus(t, status, exitCannotRun, stderr)
	// The lock was released after the failed start.
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--no-wait", "k", "--", "true")
	expectStatus(t, status, 0, stderr)
}

func TestPasswordsNeverAppearInOutput(t *testing.T) {
	for _, u := range []string{
		"redis://user:s3cret@localhost:6379/0",
		"file://user:s3cret@localhost/tmp/x",
		"mem://user:s3cret@name",
	} {
		out, stderr, _ := runDistlock(t, nil, "run", "--verbose", "--url", u, "k", "--", "true")
		if strings.Contains(out+stderr, "s3cret") {
			t.Errorf("%s: password printed:\n%s%s", u, out, stderr)
		}
	}
}

func TestURLDefaultsToEnvironmentThenTempDir(t *testing.T) {
	fromEnv := t.TempDir()
	_, stderr, status := runDistlock(t, testEnv("DISTLOCK_URL="+fileURL(fromEnv)), "run", "k", "--", "true")
	expectStatus(t, status, 0, stderr)
	if !fileExists(filepath.Join(fromEnv, "distlock", "k.lock")) {
		t.Errorf("no lock file under $DISTLOCK_URL's directory")
	}
	tmp := t.TempDir()
	_, stderr, status = runDistlock(t, testEnv("TMPDIR="+tmp), "run", "k", "--", "true")
	expectStatus(t, status, 0, stderr)
	if !fileExists(filepath.Join(tmp, "distlock", "distlock", "k.lock")) {
		t.Errorf("no lock file under $TMPDIR/distlock")
	}
}

func TestHelpListsExitStatuses(t *testing.T) {
	out, stderr, status := runDistlock(t, nil, "help")
	expectStatus(t, status, 0, stderr)
	for _, want := range []string{"distlock run", "--no-wait", "64", "69", "74", "75", "78", "--signal-child-only", "DISTLOCK_TOKEN"} {
		if !strings.Contains(out, want) {
			t.Errorf("help does not mention %q", want)
		}
	}
}

// On a backend whose locks expire (mem here, Redis, Redlock, etcd) the server
// frees the lock TTL after the last refresh it saw, so distlock must begin
// stopping the command --grace before that; a grace of half the TTL or more
// would leave too little time between refreshes and is refused. A session-bound
// backend (file here) keeps the lock while distlock's session lives, so any
// grace is allowed there.
func TestGraceMustBeUnderHalfTheTTLWhereLocksExpire(t *testing.T) {
	fileU := fileURL(t.TempDir())
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--url", "mem://grace", "--ttl", "1s", "--grace", "500ms"}, exitUsage},
		{[]string{"--url", "mem://grace?ttl=1s", "--grace", "600ms"}, exitUsage},
		{[]string{"--url", "mem://grace", "--grace", "15s"}, exitUsage}, // the default TTL, 30s
		{[]string{"--url", "mem://grace", "--ttl", "1s", "--grace", "499ms"}, 0},
		{[]string{"--url", "mem://grace", "--ttl", "1s"}, 0}, // the default grace shrinks to TTL/3
		{[]string{"--url", "mem://grace"}, 0},
		{[]string{"--url", fileU, "--ttl", "1s", "--grace", "5s"}, 0},
	} {
		args := append(append([]string{"run"}, tc.args...), "k", "--", "true")
		_, stderr, status := runDistlock(t, nil, args...)
		if status != tc.want {
			t.Errorf("distlock %q: exit status %d, want %d; stderr:\n%s", args, status, tc.want, stderr)
		}
		if tc.want == exitUsage && !strings.Contains(stderr, "shorter than half the TTL") {
			t.Errorf("distlock %q: stderr does not say why:\n%s", args, stderr)
		}
		if tc.want == exitUsage {
			expectShortUsageError(t, args, stderr)
		}
	}
}

// distlock refreshes a lock on an expiring backend itself (to know when it last
// confirmed it): a command that runs for several TTLs keeps the lock and is not
// stopped.
func TestCommandOutlivingTheTTLKeepsTheLockWhereLocksExpire(t *testing.T) {
	for _, b := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"mem", func(testing.TB) string { return "mem://outlive" }},
		{"redis", testserver.Redis},
	} {
		t.Run(b.name, func(t *testing.T) {
			_, stderr, status := runDistlock(t, nil, "run", "--url", b.url(t), "--ttl", "300ms", "--grace", "100ms", "k-outlive", "--", "sleep", "1.2")
			expectStatus(t, status, 0, stderr)
		})
	}
}
