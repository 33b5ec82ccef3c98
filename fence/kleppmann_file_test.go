//go:build linux

package fence_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock"
)

// Kleppmann's scenario on the file backend, with a real holder process: it
// takes the lock, is frozen with SIGSTOP past its TTL, and is evicted with
// ForceRelease (flocks are session-bound: a stopped process keeps its flock);
// the second holder takes the lock and writes through the fence; the first is
// continued, writes, and is refused with 409; the stored value is the second's.
func TestPausedHolderProcessOnFileIsRefusedByTheHandler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	rs := newResourceServer(t)
	const key = "invoice:42"

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderDirEnv+"="+dir, holderKeyEnv+"="+key, holderURLEnv+"="+rs.URL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines, exited := make(chan string, 2), make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = cmd.Wait()
		close(lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	next := func(what string) string {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("holder exited before %s: %s", what, stderr.String())
			}
			return line
		case <-ctx.Done():
			t.Fatalf("no %s from the holder: %s", what, stderr.String())
		}
		return ""
	}
	var firstToken uint64
	if _, err := fmt.Sscanf(next("its token"), "token %d", &firstToken); err != nil {
		t.Fatal(err)
	}
	// The timeline, logged for docs/FENCING.md.
	begin := time.Now()
	event := func(format string, args ...any) {
		t.Logf("%6.1fms  %s", float64(time.Since(begin).Microseconds())/1000, fmt.Sprintf(format, args...))
	}
	event("holder A (pid %d) holds %q with token %d", cmd.Process.Pid, key, firstToken)

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := waitStopped(t, ctx, cmd.Process.Pid)
	event("A frozen (SIGSTOP)")
	second, err := lock.Open(ctx, (&url.URL{Scheme: "file", Path: dir}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The holder's lease (200ms) runs out while it is frozen; its flock stays.
	for time.Since(stoppedAt) < 300*time.Millisecond {
		if _, err := second.TryAcquire(ctx, key); err == nil {
			t.Fatal("the frozen holder's lock was free without an eviction")
		}
		time.Sleep(50 * time.Millisecond)
	}
	event("A's 200ms lease has run out; its flock stays, so B cannot take the lock")
	if err := second.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	event("operator evicts A (ForceRelease)")
	err = second.Do(ctx, key, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		if l.Token() <= firstToken {
			t.Errorf("second token %d is not above the frozen holder's %d", l.Token(), firstToken)
		}
		event("holder B holds %q with token %d", key, l.Token())
		code, body, err := put(ctx, rs.URL, key, l.Token(), "second")
		if err == nil && code != http.StatusOK {
			t.Errorf("second holder's PUT: %d %s", code, body)
		}
		event("B's write, token %d: %d", l.Token(), code)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	event("A continued (SIGCONT); it writes as if it still held the lock")
	if _, err := stdin.Write([]byte("write\n")); err != nil {
		t.Fatal(err)
	}
	got := next("its write's status")
	if !strings.HasPrefix(got, "status 409 ") || !strings.Contains(got, "stale") {
		t.Fatalf("the resumed holder's write: %q, want status 409 naming a stale token", got)
	}
	event("A's write, token %d: %s", firstToken, strings.TrimPrefix(got, "status "))
	if got := rs.stored(); got != "second" {
		t.Fatalf("stored %q, want the second holder's", got)
	}
}

// waitStopped waits until the kernel shows pid stopped, and returns when.
func waitStopped(t *testing.T, ctx context.Context, pid int) time.Time {
	t.Helper()
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the parenthesised command name.
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "T") {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			t.Fatal("the holder did not stop")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
