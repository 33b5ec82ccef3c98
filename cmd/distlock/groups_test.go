//go:build linux

package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// grandchildScript starts a grandchild (sleep 300) in the background, writes
// its pid to $PIDFILE, says ready and waits for it: the shape of a command
// that starts processes of its own and does not pass signals on.
const grandchildScript = `sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$PIDFILE"; echo ready; wait`

// alive tells whether pid runs: it exists and is not a zombie (this
// machine's init may not reap the orphans it inherits).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// startWithGrandchild starts distlock with args, its command being
// grandchildScript, and returns it with the grandchild's pid.
func startWithGrandchild(t *testing.T, args ...string) (*proc, int) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "grandchild.pid")
	p := start(t, testEnv("PIDFILE="+pidfile), append(args, "--", "sh", "-c", grandchildScript)...)
	p.expectLine(p.stdout, "ready")
	data, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || !alive(pid) {
		t.Fatalf("grandchild pid %q (%v) is not running", data, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return p, pid
}

// expectGone waits until pid no longer runs, failing after the watchdog.
func expectGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the grandchild %d still runs %v after %s", pid, watchdog, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loseFileLock replaces dir's one lock file, as an operator or another
// process could: the holder's next check finds its lock lost.
func loseFileLock(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.lock"))
	if err != nil || len(files) != 1 {
		t.Fatalf("lock files %v (%v), want one", files, err)
	}
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
}

// A lost lock or leadership stops the command's whole process group, so a
// process the command started does not run on without the lock.
func TestLostLockStopsTheCommandsChildrenToo(t *testing.T) {
	for _, verb := range []string{"run", "elect"} {
		t.Run(verb, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{verb, "--url", fileURL(dir), "--ttl", "300ms", "--grace", "200ms"}
			if verb == "elect" {
				args = append(args, "--once")
			}
			p, pid := startWithGrandchild(t, append(args, "job")...)
			loseFileLock(t, dir)
			expectStatus(t, p.wait(), exitLost, p.stderrText())
			if alive(pid) {
				t.Errorf("the grandchild %d runs on after distlock exited on a lost lock", pid)
			}
		})
	}
}

// Released after the command exits by itself, the lock must not leave behind
// a process the command started in the background: it gets SIGTERM too.
func TestCommandsLeftoverChildrenAreStoppedBeforeTheRelease(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "grandchild.pid")
	_, stderr, status := runDistlock(t, testEnv("PIDFILE="+pidfile), "run", "--url", fileURL(t.TempDir()), "job", "--",
		"sh", "-c", `sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$PIDFILE"; exit 7`)
	expectStatus(t, status, 7, stderr)
	data, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if pid == 0 || alive(pid) {
		t.Errorf("the grandchild %q runs on after distlock released the lock", data)
	}
}

// distlock killed with SIGKILL cannot stop anything itself; its watcher
// kills the command's process group, grandchildren included.
func TestKilledDistlockTakesTheCommandsChildrenWithIt(t *testing.T) {
	for _, verb := range []string{"run", "elect"} {
		t.Run(verb, func(t *testing.T) {
			p, pid := startWithGrandchild(t, verb, "--url", fileURL(t.TempDir()), "job")
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			p.wait()
			p.wait()
			expectGone(t, pid, "distlock was killed")
		})
	}
}

// --signal-child-only is for a command that manages its own processes:
// distlock signals the command alone, and leaves the rest to it.
func TestSignalChildOnlyLeavesTheCommandsChildrenToIt(t *testing.T) {
	dir := t.TempDir()
	p, pid := startWithGrandchild(t, "run", "--signal-child-only", "--url", fileURL(dir), "--ttl", "300ms", "--grace", "200ms", "job")
	loseFileLock(t, dir)
	expectStatus(t, p.wait(), exitLost, p.stderrText())
	if !alive(pid) {
		t.Errorf("with --signal-child-only the grandchild %d was stopped too", pid)
	}
}

// In the foreground of a terminal the command stays in distlock's process
// group, so that it can read the terminal and the terminal's Ctrl-C and
// Ctrl-Z reach it; elsewhere it leads a group of its own.
func TestCommandStaysInDistlocksGroupInATerminalsForeground(t *testing.T) {
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skip("needs script(1) to give distlock a terminal:", err)
	}
	check := `if [ "$(cut -d' ' -f5 /proc/$$/stat)" = "$(cut -d' ' -f5 /proc/$PPID/stat)" ]; then echo same-group; else echo own-group; fi`
	u := fileURL(t.TempDir())
	out, stderr, status := runDistlock(t, nil, "run", "--url", u, "job", "--", "sh", "-c", check)
	expectStatus(t, status, 0, stderr)
	if !strings.Contains(out, "own-group") {
		t.Errorf("without a terminal the command printed %q, want own-group", out)
	}
	// script(1) runs its command on a new terminal, in its foreground.
	line := strings.Join([]string{distlockBin, "run", "--url", u, "job", "--", "sh", "-c", shellQuote(check)}, " ")
	cmd := exec.Command(scriptBin, "-qec", line, "/dev/null")
	cmd.Env = testEnv(beDistlock, "GORACE=atexit_sleep_ms=0")
	done := make(chan struct{})
	var tout []byte
	go func() {
		tout, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(watchdog):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("distlock on a terminal did not exit; output:\n%s", tout)
	}
	if err != nil || !strings.Contains(string(tout), "same-group") {
		t.Errorf("on a terminal the command printed %q (%v), want same-group", tout, err)
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runGate runs distlock's exec gate on argv, says "go" to it if sayGo, and
// returns its exit status and what it reported on its error pipe.
func runGate(t *testing.T, sayGo bool, argv ...string) (int, string) {
	t.Helper()
	goR, goW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer errR.Close()
	cmd := exec.Command(distlockBin, append([]string{execGateCommand}, argv...)...)
	cmd.Env = testEnv(beDistlock, "GORACE=atexit_sleep_ms=0")
	cmd.ExtraFiles = []*os.File{goR, errW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	goR.Close()
	errW.Close()
	if sayGo {
		if _, err := goW.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
	}
	goW.Close()
	reported, err := io.ReadAll(errR)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	status := 0
	if ee, ok := err.(*exec.ExitError); ok {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return status, string(reported)
}

// The gate that holds the command back until the watcher knows its group
// runs the command only once distlock says so: a distlock that died before
// (its end of the pipe closed) leaves nothing started.
func TestGatedCommandNeverRunsWhenDistlockDiesBeforeSayingGo(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	status, reported := runGate(t, false, "/bin/sh", "sh", "-c", `touch "$0"`, ran)
	if status != exitCannotRun || reported != "" {
		t.Errorf("gate without go: status %d, reported %q; want %d and nothing", status, reported, exitCannotRun)
	}
	if fileExists(ran) {
		t.Errorf("the command ran although distlock never said go")
	}
	status, reported = runGate(t, true, "/bin/sh", "sh", "-c", `touch "$0"`, ran)
	if status != 0 || reported != "" || !fileExists(ran) {
		t.Errorf("gate told go: status %d, reported %q, ran %v; want 0, nothing, true", status, reported, fileExists(ran))
	}
	// A failed exec reports its errno to distlock, which reports it as its own start would.
	status, reported = runGate(t, true, filepath.Join(dir, "missing"), "missing")
	if status != exitCannotRun || reported != strconv.Itoa(int(syscall.ENOENT)) {
		t.Errorf("gate of a missing command: status %d, reported %q; want %d and ENOENT's number", status, reported, exitCannotRun)
	}
}
