//go:build linux

package filedriver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	lock "github.com/distlock/lock"
)

// startHolder starts a child process holding key in dir and returns it with the
// token it was granted.
type holderProc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
}

// kill sends SIGKILL to the holder; it does not wait for the process to end.
func (p *holderProc) kill(t *testing.T) {
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
}

func startHolder(t *testing.T, dir, key string, env ...string) (*holderProc, uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childDirEnv+"="+dir, childKeyEnv+"="+key), env...)
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
	exited := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(lines)
	}()
	line, ok := <-lines
	if !ok {
		t.Fatalf("holder process exited without a token: %s", stderr.String())
	}
	var token uint64
	if _, err := fmt.Sscanf(line, "token %d", &token); err != nil {
		t.Fatalf("holder printed %q: %v", line, err)
	}
	return &holderProc{cmd, exited}, token
}

func TestKilledHolderProcessFreesLockAtOnce(t *testing.T) {
	dir := t.TempDir()
	child, childToken := startHolder(t, dir, "job")

	d := newDriver(t, dir)
	blocked := blockedHook(d)
	lk := lock.New(d)
	defer lk.Close()
	ctx := testCtx(t)
	if _, err := lk.TryAcquire(ctx, "job"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("lock held by another process: got %v, want ErrLocked", err)
	}

	type result struct {
		l   *lock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := lk.Acquire(ctx, "job")
		got <- result{l, err, time.Now()}
	}()
	waitFor(t, blocked, "the waiter to block")

	killed := time.Now()
	child.kill(t)
	res := waitFor(t, got, "the waiter to acquire")
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.l.Release(ctx)
	lat := res.at.Sub(killed)
	t.Logf("acquired %v after SIGKILL of the holder", lat)
	if lat > promptWake {
		t.Fatalf("waiter took %v after the holder was killed, want under %v", lat, promptWake)
	}
	if tok := res.l.Token(); tok <= childToken {
		t.Fatalf("token %d after the killed holder's %d", tok, childToken)
	}
}

func TestLockHeldByAnotherProcessIsExcludedUntilItExits(t *testing.T) {
	dir := t.TempDir()
	child, childToken := startHolder(t, dir, "job")
	d := newDriver(t, dir)
	ctx := testCtx(t)
	if _, err := d.TryAcquire(ctx, newReq("job", "o")); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	if _, err := d.TryAcquire(ctx, newReq("other", "o")); err != nil {
		t.Fatalf("a different key: %v", err)
	}
	child.kill(t)
	waitFor(t, child.exited, "the holder to exit")
	if tok := mustAcquire(t, d, newReq("job", "o")); tok != childToken+1 {
		t.Fatalf("token %d after the child's %d", tok, childToken)
	}
}
