// Package staleholder runs Kleppmann's scenario against a real fenced
// resource: a lock holder in a child process (the test binary run again)
// takes a lock through lock.Open (requiring fencing tokens), writes the
// resource with its token if told to, and can then be frozen (SIGSTOP) past
// its TTL, evicted, or have its session severed;
// told to write again, it writes with its old token, as a process that woke
// from a pause would, and reports whether the resource refused the write
// with fence.ErrStale.
//
// A test package calls Main first in its TestMain, with the fenced write it
// tests, and Start in a test:
//
//	func TestMain(m *testing.M) {
//		staleholder.Main(fencedWrite)
//		leakcheck.VerifyTestMain(testserver.Main(m))
//	}
package staleholder

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/testchild"
)

// env carries a holder process's Spec, as JSON.
const env = "DISTLOCK_STALEHOLDER"

// Spec is what a holder process does.
type Spec struct {
	URL string        // the lock's backend, for lock.Open
	Key string        // the lock's key
	TTL time.Duration // the lock's TTL; zero: the backend's default
	// Resource names the fenced resource for the package's Write function
	// (for example a server's URL and a key); First is the value the
	// holder writes once it holds the lock, if not empty.
	Resource, First string
}

// Write is a fenced write of value to resource with token.
type Write func(ctx context.Context, resource string, token uint64, value string) error

// Outcomes of a holder's late write, as Holder.Write reports them.
const (
	Admitted = "admitted"
	Stale    = "stale" // the error matched fence.ErrStale
)

// Main turns the test binary into a holder process when Start started it as
// one (and exits), and returns at once otherwise.
func Main(write Write) {
	raw := os.Getenv(env)
	if raw == "" {
		return
	}
	os.Exit(runHolder(raw, write))
}

func runHolder(raw string, write Write) int {
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Printf("error bad %s: %v\n", env, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A lock without tokens has nothing to fence with: fail at Open.
	opts := []lock.Option{lock.WithRequired(lock.Capabilities{Fencing: true})}
	if spec.TTL != 0 {
		opts = append(opts, lock.WithTTL(spec.TTL))
	}
	lk, err := lock.Open(ctx, spec.URL, opts...)
	if err != nil {
		fmt.Printf("error %s\n", oneLine(err))
		return 1
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, spec.Key)
	if err != nil {
		fmt.Printf("error %s\n", oneLine(err))
		return 1
	}
	tok := l.Token()
	if spec.First != "" {
		if err := write(ctx, spec.Resource, tok, spec.First); err != nil {
			fmt.Printf("error first write: %s\n", oneLine(err))
			return 1
		}
	}
	fmt.Printf("held %d\n", tok)
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return 0
	}
	// The late write: with the token of a lock this process may no longer
	// hold, whatever l.Lost() says by now, as a process that was paused
	// between its check and its write.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = write(wctx, spec.Resource, tok, in.Text())
	wcancel()
	switch {
	case err == nil:
		fmt.Println(Admitted)
	case errors.Is(err, fence.ErrStale):
		fmt.Println(Stale, oneLine(err))
	default:
		fmt.Printf("error %s\n", oneLine(err))
	}
	for in.Scan() { // until the test is done with us
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	_ = l.Release(rctx) // ErrLost, normally: the lock is its successor's
	return 0
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// Holder is a running holder process.
type Holder struct {
	Token uint64 // the token it holds (or held) the lock with
	// Refusal is the late write's error once Write returned Stale, as
	// the holder saw it (one line).
	Refusal string

	proc *testchild.Child
}

// Start starts a holder process of spec and returns once it holds the lock
// and has written spec.First (if any). The process is killed when t ends.
func Start(t testing.TB, spec Spec) *Holder {
	t.Helper()
	raw, _ := json.Marshal(spec)
	proc, err := testchild.Start(t, env, string(raw))
	if err != nil {
		t.Fatalf("starting a holder process: %v", err)
	}
	h := &Holder{proc: proc}
	line := h.next(t, 30*time.Second, "hold the lock and write")
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "held" {
		t.Fatalf("holder process: %s", line)
	}
	if h.Token, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		t.Fatalf("holder process: bad line %q", line)
	}
	return h
}

// next returns the holder's next line, failing t if none comes within bound.
func (h *Holder) next(t testing.TB, bound time.Duration, what string) string {
	t.Helper()
	line, err := h.proc.Next(bound)
	switch {
	case errors.Is(err, testchild.ErrExited):
		t.Fatalf("the holder process exited before it could %s: does TestMain call staleholder.Main first?", what)
	case err != nil:
		t.Fatalf("the holder process did not %s within %v", what, bound)
	}
	return line
}

// Pid is the holder process's id.
func (h *Holder) Pid() int { return h.proc.Pid() }

// Freeze stops the holder (SIGSTOP): its connections stay open, it neither
// refreshes its lock nor notices losing it. On Linux it returns once the
// kernel shows the process stopped, with that time: a pause measured from it
// is one the holder really spent frozen (elsewhere, when the signal was sent).
func (h *Holder) Freeze(t testing.TB) time.Time {
	t.Helper()
	stopped, err := h.proc.Stop()
	if err != nil {
		t.Fatalf("freezing the holder process: %v", err)
	}
	return stopped
}

// Write has the holder write value with its token, resuming it first if it
// is frozen (the value is in its input before it runs again), and returns
// the outcome: Admitted, Stale (the error in h.Refusal), or "error ..." for
// any other error.
func (h *Holder) Write(t testing.TB, value string) string {
	t.Helper()
	if strings.Contains(value, "\n") {
		t.Fatalf("staleholder: a value holds no newline")
	}
	if err := h.proc.WriteLine(value); err != nil {
		t.Fatalf("telling the holder process to write: %v", err)
	}
	if err := h.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("resuming the holder process: %v", err)
	}
	line := h.next(t, 30*time.Second, "write")
	if refusal, ok := strings.CutPrefix(line, Stale+" "); ok {
		h.Refusal = refusal
		return Stale
	}
	return line
}
