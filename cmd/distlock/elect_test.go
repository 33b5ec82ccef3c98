package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/lock/internal/testserver"
)

// leaderScript logs its term's start and end around its work (until its
// standard input closes) to $LOG, with its value and term.
const leaderScript = `echo "start $DISTLOCK_LEADER_VALUE $DISTLOCK_TOKEN" >> "$LOG"; echo ready; read line; echo "end $DISTLOCK_LEADER_VALUE $DISTLOCK_TOKEN" >> "$LOG"`

// Two distlock elect processes on a networked backend: the command runs only
// in the leader; when the leader's command ends, the leader resigns and the
// other takes over with a larger term; their terms never overlap.
func TestElectRunsTheCommandOnlyWhileLeading(t *testing.T) {
	u := testserver.Redis(t)
	logPath := filepath.Join(t.TempDir(), "log")
	env := testEnv("LOG=" + logPath)
	a := start(t, env, "elect", "--url", u, "--value", "a", "jobs", "--", "sh", "-c", leaderScript)
	a.expectLine(a.stdout, "ready")
	b := start(t, env, "elect", "--url", u, "--value", "b", "--verbose", "jobs", "--", "sh", "-c", leaderScript)
	b.expectLine(b.stderr, "campaigning for")

	a.stdin.Close() // the leader's command ends: it resigns
	expectStatus(t, a.wait(), 0, a.stderrText())
	b.expectLine(b.stdout, "ready")
	b.stdin.Close()
	expectStatus(t, b.wait(), 0, b.stderrText())

	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var va, vb string
	var ta, tb uint64
	if len(lines) != 4 {
		t.Fatalf("log:\n%s\nwant four lines", data)
	}
	if _, err := fmt.Sscanf(lines[0]+" "+lines[1], "start %s %d end a %d", &va, &ta, &tb); err != nil || va != "a" {
		t.Fatalf("log:\n%s\nwant a's term first and whole (%v)", data, err)
	}
	if _, err := fmt.Sscanf(lines[2], "start %s %d", &vb, &tb); err != nil || vb != "b" || tb <= ta {
		t.Fatalf("log:\n%s\nwant b's term after a's, with a larger term (%v)", data, err)
	}
}

// A leader that loses its leadership stops its command as run does, and
// campaigns again; with --once it exits 74 instead.
func TestElectCampaignsAgainAfterALossUnlessOnce(t *testing.T) {
	script := `trap 'echo terminated; exit 0' TERM; echo ready; while :; do sleep 0.01; done`
	for _, once := range []bool{false, true} {
		t.Run(fmt.Sprintf("once=%v", once), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"elect", "--url", fileURL(dir), "--ttl", "300ms", "--grace", "200ms"}
			if once {
				args = append(args, "--once")
			}
			p := start(t, nil, append(args, "jobs", "--", "sh", "-c", script)...)
			p.expectLine(p.stdout, "ready")
			// An operator deletes the lock file: the leader's next check finds
			// its leadership lost.
			files, err := filepath.Glob(filepath.Join(dir, "*", "*.lock"))
			if err != nil || len(files) != 1 {
				t.Fatalf("lock files %v (%v), want one", files, err)
			}
			if err := os.Remove(files[0]); err != nil {
				t.Fatal(err)
			}
			p.expectLine(p.stdout, "terminated")
			if once {
				expectStatus(t, p.wait(), exitLost, p.stderrText())
				return
			}
			p.expectLine(p.stdout, "ready") // leading again
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.expectLine(p.stdout, "terminated")
			expectStatus(t, p.wait(), 0, p.stderrText())
			if !strings.Contains(p.stderrText(), "lost the leadership") {
				t.Errorf("stderr does not report the loss:\n%s", p.stderrText())
			}
		})
	}
}

func TestElectWithBadValueExits64(t *testing.T) {
	_, stderr, status := runDistlock(t, nil, "elect", "--url", fileURL(t.TempDir()), "--value", "a\nb", "jobs", "--", "true")
	expectStatus(t, status, exitUsage, stderr)
}
