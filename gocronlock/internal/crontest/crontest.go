// Package crontest runs real gocron schedulers in separate processes against
// one backend, for the tests of gocronlock (file backend) and of its Redis
// test module: the test binary re-executes itself as a scheduler instance
// when its environment says so (Child), and the scenarios here start two such
// instances and check, from the lines their jobs append to one shared file,
// how often each due time ran.
package crontest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/gocronlock"
	"github.com/distlock/lock/internal/leakcheck"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

// envChild holds a child's Config, as JSON; its presence makes the test
// binary a scheduler instance.
const envChild = "GOCRONLOCK_TEST_CHILD"

// Config is what one scheduler instance does.
type Config struct {
	URL      string        // the backend
	Mode     string        // "locker" or "elector"
	Out      string        // the shared file the job appends to (O_APPEND)
	Epoch    time.Time     // tick 0 of the job, the same for all instances
	Interval time.Duration // the job's DurationJob interval
	Offset   time.Duration // this instance's ticks come this late: a clock or start offset
	MinHold  time.Duration // Locker: WithMinHold
	TTL      time.Duration // the lock's or leadership's TTL
	Job      string        // the job's name (Locker) or the election's (Elector)
}

// Child makes the test binary a scheduler instance, and exits, when its
// environment holds a Config. Call it first in TestMain.
func Child() {
	js, ok := os.LookupEnv(envChild)
	if !ok {
		return
	}
	var cfg Config
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "crontest child:", err)
		os.Exit(2)
	}
	if err := runChild(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "crontest child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// tick is the due time a moment belongs to: the nearest one of this
// instance's ticks.
func (c Config) tick(at time.Time) int64 {
	return int64(math.Round(float64(at.Sub(c.Epoch)-c.Offset) / float64(c.Interval)))
}

func runChild(cfg Config) error {
	ignore := leakcheck.IgnoreCurrent()
	out, err := os.OpenFile(cfg.Out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	pid := os.Getpid()
	var writeErr error
	var writeMu sync.Mutex
	// One write per line: O_APPEND makes each write land whole at the end,
	// whichever process writes.
	record := func(kind string, tick int64, detail string) {
		line := fmt.Sprintf("%s %d %d %d %s\n", kind, tick, pid, time.Now().UnixNano(), strings.ReplaceAll(detail, "\n", " "))
		if _, err := out.WriteString(line); err != nil {
			writeMu.Lock()
			writeErr = errors.Join(writeErr, err)
			writeMu.Unlock()
		}
	}

	ctx := context.Background()
	locker, err := lock.Open(ctx, cfg.URL)
	if err != nil {
		return err
	}
	var (
		schedOpt gocron.SchedulerOption
		closer   func() error
	)
	switch cfg.Mode {
	case "locker":
		gl := gocronlock.NewLocker(locker, gocronlock.WithMinHold(cfg.MinHold), gocronlock.WithLockOptions(lock.WithTTL(cfg.TTL)))
		schedOpt, closer = gocron.WithDistributedLocker(gl), gl.Close
	case "elector":
		el, err := gocronlock.NewElector(ctx, locker, cfg.Job, gocronlock.WithValue(strconv.Itoa(pid)), gocronlock.WithCampaignOptions(lock.WithTTL(cfg.TTL)))
		if err != nil {
			return err
		}
		schedOpt, closer = gocron.WithDistributedElector(el), el.Close
	default:
		return fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	s, err := gocron.NewScheduler(schedOpt)
	if err != nil {
		return err
	}
	// The first tick far enough ahead for the scheduler to be running.
	first := cfg.tick(time.Now().Add(cfg.Interval/2+100*time.Millisecond)) + 1
	var stopping atomic.Bool
	start := cfg.Epoch.Add(cfg.Offset + time.Duration(first)*cfg.Interval)
	_, err = s.NewJob(gocron.DurationJob(cfg.Interval),
		gocron.NewTask(func() { record("run", cfg.tick(time.Now()), "") }),
		gocron.WithName(cfg.Job),
		gocron.WithStartAt(gocron.WithStartDateTime(start)),
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			switch {
			case errors.Is(err, lock.ErrLocked):
				record("skip", cfg.tick(time.Now()), "")
			case stopping.Load() && errors.Is(err, context.Canceled):
				// Shutdown cancels the context of a Lock still in flight:
				// that tick was never going to run, and nothing failed.
				record("stopped", cfg.tick(time.Now()), "")
			default:
				record("error", cfg.tick(time.Now()), err.Error())
			}
		})))
	if err != nil {
		return err
	}
	s.Start()
	record("ready", first, "")
	// The parent closes stdin to stop this instance (and kills it to crash it).
	_, _ = io.Copy(io.Discard, os.Stdin)
	stopping.Store(true)
	errs := []error{s.Shutdown(), closer(), locker.Close()}
	writeMu.Lock()
	errs = append(errs, writeErr)
	writeMu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Everything is closed: nothing of gocron, gocronlock or lock may run on.
	return leakcheck.Find(ignore)
}

// Event is one line of the shared file.
type Event struct {
	Kind   string // ready, run, skip, error, stopped
	Tick   int64
	Pid    int
	At     time.Time
	Detail string
}

// ReadEvents parses the shared file.
func ReadEvents(t testing.TB, path string) []Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var evs []Event
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 5)
		if len(f) < 4 {
			t.Fatalf("malformed line %q", sc.Text())
		}
		tick, err1 := strconv.ParseInt(f[1], 10, 64)
		pid, err2 := strconv.Atoi(f[2])
		ns, err3 := strconv.ParseInt(f[3], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatalf("malformed line %q: %v", sc.Text(), err)
		}
		ev := Event{Kind: f[0], Tick: tick, Pid: pid, At: time.Unix(0, ns)}
		if len(f) == 5 {
			ev.Detail = f[4]
		}
		evs = append(evs, ev)
	}
	return evs
}

// Watchdog bounds every wait; reaching it is a failure, not a hang.
const Watchdog = 30 * time.Second

// WaitFor reads the shared file until cond holds of its events, and fails
// the test if it does not within d.
func WaitFor(t testing.TB, path string, d time.Duration, what string, cond func([]Event) bool) []Event {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		evs := ReadEvents(t, path)
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still waiting for %s; events:\n%s", d, what, Format(evs))
		}
		time.Sleep(10 * time.Millisecond) // polling a file: nothing to be woken by
	}
}

// Format prints events for a failure message.
func Format(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s tick %d pid %d at %s %s\n", e.Kind, e.Tick, e.Pid, e.At.Format("15:04:05.000"), e.Detail)
	}
	return b.String()
}

// Proc is a running scheduler instance.
type Proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr strings.Builder
	done   chan struct{}
	err    error
}

// Pid is the instance's process id, as its events name it.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Start runs a scheduler instance: this test binary, re-executed.
func Start(t testing.TB, cfg Config) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	// A race-enabled program sleeps a second before exiting unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), envChild+"="+string(js), "GORACE="+gorace)
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{b: &p.stderr}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Stop asks the instance to shut down (scheduler, gocronlock, lock, in that
// order) and fails the test unless it exits cleanly, without a leaked
// goroutine, within the watchdog.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(Watchdog):
		t.Fatalf("instance %d did not stop within %v", p.Pid(), Watchdog)
	}
	if p.err != nil {
		t.Errorf("instance %d: %v; stderr:\n%s", p.Pid(), p.err, p.cmd.Stderr.(*lockedWriter).String())
	}
}

// Kill crashes the instance (SIGKILL) and waits until it is gone.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(Watchdog):
		t.Fatalf("instance %d did not die within %v", p.Pid(), Watchdog)
	}
}

// Count tallies events of a kind per tick.
func Count(evs []Event, kind string) map[int64]int {
	n := map[int64]int{}
	for _, e := range evs {
		if e.Kind == kind {
			n[e.Tick]++
		}
	}
	return n
}

// ReadyTick is the first tick after which both instances were running, or
// -1 until both are.
func ReadyTick(evs []Event, procs ...*Proc) int64 {
	first := int64(math.MinInt64)
	for _, p := range procs {
		i := slices.IndexFunc(evs, func(e Event) bool { return e.Kind == "ready" && e.Pid == p.Pid() })
		if i < 0 {
			return -1
		}
		first = max(first, evs[i].Tick)
	}
	return first
}
