package main

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/internal/testserver"
)

// distlockBin is the distlock run by the tests: this test binary itself, which
// acts as distlock when beDistlock is set in its environment. The tests run it as
// users do, as separate processes, without building a second binary (a
// non-race build of distlock and all its drivers cost about a minute on a cold
// build cache), and distlock's own goroutines run under the race detector too.
var distlockBin string

// beDistlock in the environment makes the test binary act as distlock.
const beDistlock = "DISTLOCK_TEST_BE_DISTLOCK=1"

func TestMain(m *testing.M) {
	if slices.Contains(os.Environ(), beDistlock) {
		os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	distlockBin = exe
	leakcheck.VerifyTestMain(testserver.Main(m))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// watchdog bounds every wait in these tests; hitting it is a failure, not a hang.
const watchdog = 20 * time.Second

func fileURL(dir string) string { return (&url.URL{Scheme: "file", Path: dir}).String() }

// testEnv is the environment of a distlock under test: ours without any
// DISTLOCK_ variable, plus extra.
func testEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DISTLOCK_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// proc is a running distlock with its output read line by line.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout chan string // closed at EOF
	stderr chan string // closed at EOF

	mu        sync.Mutex
	errText   strings.Builder // all of stderr
	done      chan struct{}   // closed once the process has been waited for
	exitCode  int
	startTime time.Time
}

// start runs distlock with args and env (testEnv() if nil).
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	if env == nil {
		env = testEnv()
	}
	cmd := exec.Command(distlockBin, args...)
	// A race-enabled program sleeps a second before exiting unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(env[:len(env):len(env)], beDistlock, "GORACE="+gorace)
	// A session of its own, without a controlling terminal, as under cron or
	// a service manager: run from a terminal, the tests would otherwise have
	// distlock in the terminal's foreground (see inTerminalForeground).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p := &proc{t: t, cmd: cmd, stdout: make(chan string, 100), stderr: make(chan string, 100), done: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.startTime = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var reads sync.WaitGroup
	reads.Add(2)
	go p.scan(outPipe, p.stdout, nil, &reads)
	go p.scan(errPipe, p.stderr, &p.errText, &reads)
	go func() {
		reads.Wait()
		_ = cmd.Wait()
		p.exitCode = cmd.ProcessState.ExitCode() // -1 if distlock itself was killed by a signal
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) scan(r io.Reader, lines chan<- string, all *strings.Builder, wg *sync.WaitGroup) {
	defer wg.Done()
	defer close(lines)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if all != nil {
			p.mu.Lock()
			all.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		select {
		case lines <- sc.Text():
		default: // nobody is reading these lines
		}
	}
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errText.String()
}

// expectLine waits for the next line on ch to contain want.
func (p *proc) expectLine(ch <-chan string, want string) {
	p.t.Helper()
	select {
	case line, ok := <-ch:
		if !ok {
			p.t.Fatalf("distlock output ended before %q; stderr:\n%s", want, p.stderrText())
		}
		if !strings.Contains(line, want) {
			p.t.Fatalf("distlock printed %q, want %q; stderr:\n%s", line, want, p.stderrText())
		}
	case <-time.After(watchdog):
		p.t.Fatalf("timed out waiting for %q; stderr:\n%s", want, p.stderrText())
	}
}

// wait waits for distlock to exit and returns its exit status.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.exitCode
	case <-time.After(watchdog):
		p.t.Fatalf("distlock did not exit; stderr:\n%s", p.stderrText())
		return 0
	}
}

// runDistlock runs distlock to completion and returns its stdout, stderr and
// exit status.
func runDistlock(t *testing.T, env []string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	p := start(t, env, args...)
	p.stdin.Close()
	var out strings.Builder
	for line := range p.stdout {
		out.WriteString(line + "\n")
	}
	status = p.wait()
	return out.String(), p.stderrText(), status
}

func expectStatus(t *testing.T, got, want int, stderr string) {
	t.Helper()
	if got != want {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", got, want, stderr)
	}
}

// runsInTurn lets procs finish (each must exit 0) and checks the log their
// commands wrote, a "start N" and an "end N" line each (appended, so lines of
// overlapping runs interleave): every start is followed by its own end. It
// returns each run's N in the order they ran.
func runsInTurn(t *testing.T, procs []*proc, logPath string) []uint64 {
	t.Helper()
	for _, p := range procs {
		p.stdin.Close()
		expectStatus(t, p.wait(), 0, p.stderrText())
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*len(procs) {
		t.Fatalf("log has %d lines, want %d:\n%s", len(lines), 2*len(procs), b)
	}
	var ids []uint64
	for i := 0; i < len(lines); i += 2 {
		var start, end uint64
		if _, err := fmt.Sscanf(lines[i]+" "+lines[i+1], "start %d end %d", &start, &end); err != nil || start != end {
			t.Fatalf("runs overlapped at line %d:\n%s", i+1, b)
		}
		ids = append(ids, start)
	}
	return ids
}
