// Package testchild runs the test binary again as a child process, told
// what to be by one environment variable: a lock holder with its own
// process, connections and signals, for tests that freeze (SIGSTOP) or kill
// it. The child's TestMain sees the variable and becomes that process
// instead of running tests; the parent talks to it through its standard
// input and reads its standard output line by line.
//
// Its users are internal/staleholder (a holder that writes a fenced
// resource late) and conformance (the frozen and killed holder
// properties); each owns its variable and its line protocol.
package testchild

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Errors of Next.
var (
	// ErrExited: the child's output ended (it exited) before a line came.
	ErrExited = errors.New("testchild: the child process exited")
	// ErrTimeout: no line came within Next's bound.
	ErrTimeout = errors.New("testchild: no line from the child process in time")
)

// Child is a running child process.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string   // its standard output, line by line; closed at its end
	done  chan struct{} // closed once the process was reaped
}

// Start starts the test binary again, running no test, with name=value in
// its environment and its standard error the test's. The child is killed
// (Kill) when t ends, and on Linux by the kernel if the test binary dies
// first (a frozen child could not notice).
func Start(t testing.TB, name, value string) (*Child, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), name+"="+value)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = killedWithParent()
	c := &Child{cmd: cmd, stdin: stdin, lines: make(chan string, 4), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// killedWithParent's signal follows the starting thread: keep
		// it until the child has exited.
		runtime.LockOSThread()
		defer close(c.done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	t.Cleanup(c.Kill)
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	return c, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Next returns the child's next line of output: ErrExited if its output
// ended first, ErrTimeout if none came within bound.
func (c *Child) Next(bound time.Duration) (string, error) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case line, ok := <-c.lines:
		if !ok {
			return "", ErrExited
		}
		return line, nil
	case <-timer.C:
		return "", fmt.Errorf("%w (%v)", ErrTimeout, bound)
	}
}

// Discard reads and drops the rest of the child's output, in the
// background, so that it never blocks on a full pipe.
func (c *Child) Discard() {
	go func() {
		for range c.lines {
		}
	}()
}

// WriteLine writes line and a newline to the child's standard input.
func (c *Child) WriteLine(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// Signal sends sig to the child.
func (c *Child) Signal(sig syscall.Signal) error { return c.cmd.Process.Signal(sig) }

// Stop freezes the child (SIGSTOP). On Linux it returns once the kernel
// shows the child stopped, with that time, so that a pause measured from it
// is one the child really spent frozen; elsewhere it returns when the signal
// was sent.
func (c *Child) Stop() (time.Time, error) {
	if err := c.Signal(syscall.SIGSTOP); err != nil {
		return time.Time{}, err
	}
	return waitStopped(c.cmd.Process.Pid, 30*time.Second)
}

// Kill kills the child (frozen or not), closes its standard input and
// returns once it was reaped and its output has ended. Calling it again does
// nothing more.
func (c *Child) Kill() {
	_ = c.Signal(syscall.SIGKILL)
	_ = c.stdin.Close()
	<-c.done
	for range c.lines { // its pipe's reader ends with the process
	}
}
