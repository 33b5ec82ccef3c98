package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/lock"
)

// runHolding runs the command, with env, while l is held, and releases l when
// the command exits. It returns the command's exit status, or exitLost if the lock was lost
// at any time before the release.
//
// On a loss the order is: SIGTERM, up to --grace for the command to exit,
// SIGKILL, wait until it has exited, and only then release. Where the backend
// still holds the lock for distlock's session (PostgreSQL, ZooKeeper, file: the
// loss was distlock's own deadline, say after it was paused), nobody else can
// take it while the command runs.
func (r *runner) runHolding(l holding, env []string) int {
	// A signal that arrived between the grant and the start ends the run here.
	select {
	case s := <-r.sigs:
		r.release(l)
		r.errorf("%v before the command started", s)
		return exitSignalBase + signum(s)
	default:
	}

	c, status := r.startChild(env)
	if c == nil {
		r.release(l)
		return status
	}
	exited := make(chan struct{})
	go func() {
		_ = c.cmd.Wait() // the status is read from cmd.ProcessState
		close(exited)
	}()

	lost := l.Lost()
	wasLost := false
	var st stopping
	for waiting := true; waiting; {
		select {
		case <-exited:
			waiting = false
		case s := <-r.sigs:
			c.signal(s)
		case <-lost:
			r.errorf("lost the %s %q (cause: %s) on %s: %v; terminating %s", r.what(), blockingKey(l.Err(), r.cfg.key), lossCause(l.Err()), r.locker, l.Err(), r.cfg.argv[0])
			wasLost = true
			c.signal(syscall.SIGTERM)
			st = stopping{termSent: true, kill: time.After(r.grace)}
			lost = nil
		case <-st.kill:
			st.kill, st.killSent = nil, true
			r.errorf("%s did not exit within --grace %v; killing it", r.cfg.argv[0], r.grace)
			c.signal(syscall.SIGKILL)
		}
	}

	// The command has exited (and been waited for), and so has what it left
	// in its group: only now may the lock go.
	r.stopLeftovers(c, st)
	c.watch.stop()
	status = exitStatus(c.cmd.ProcessState)
	if err := r.release(l); err != nil {
		if errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrLost) {
			if !wasLost {
				r.errorf("the %s %q was lost (cause: %s) before %s exited: %v", r.what(), blockingKey(err, r.cfg.key), lossCause(err), r.cfg.argv[0], err)
			}
			wasLost = true
		} else {
			r.errorf("%v", err) // it ends with our session or expires
		}
	}
	if wasLost {
		return exitLost
	}
	return status
}

// holding is what a command runs under: a lock, a set of locks, or a
// leadership (whose Release resigns).
type holding interface {
	Lost() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// environment are the variables distlock gives CMD; an outer distlock's are
// dropped from CMD's environment, so a set's CMD sees no DISTLOCK_KEY.
var environment = []string{"DISTLOCK_KEY", "DISTLOCK_TOKEN", "DISTLOCK_KEYS", "DISTLOCK_TOKENS", "DISTLOCK_LEADER_VALUE"}

// baseEnv is distlock's environment without the variables it sets for CMD.
func (r *runner) baseEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(environment, name)
	})
}

// env is CMD's environment under one lock (or leadership) whose fencing token
// is token() (asked only where the backend has them), and says what is held
// when --verbose.
func (r *runner) env(token func() uint64) []string {
	env := append(r.baseEnv(), "DISTLOCK_KEY="+r.cfg.key)
	if r.cfg.elect {
		env = append(env, "DISTLOCK_LEADER_VALUE="+r.cfg.value)
	}
	if r.locker.Capabilities().Fencing {
		tok := strconv.FormatUint(token(), 10)
		env = append(env, "DISTLOCK_TOKEN="+tok)
		r.verbosef("holding the %s %q on %s, token %s", r.what(), r.cfg.key, r.locker, tok)
	} else {
		r.verbosef("holding the %s %q on %s (no fencing token on this backend)", r.what(), r.cfg.key, r.locker)
	}
	return env
}

// leading is a leadership as a holding.
type leading struct{ *lock.Leadership }

func (l leading) Release(ctx context.Context) error { return l.Resign(ctx) }

// what names what distlock holds, for its messages.
func (r *runner) what() string {
	if r.cfg.elect {
		return "leadership of"
	}
	return "lock"
}

// startChild starts the command with env, in a process group of its own
// unless --signal-child-only or a terminal's foreground says otherwise, with
// a groupWatcher for that group. It returns nil and the exit status if the
// command could not start.
func (r *runner) startChild(env []string) (*child, int) {
	cmd := exec.Command(r.cfg.argv[0], r.cfg.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env // later entries win, so an outer distlock's variables are replaced
	setParentDeathSignal(cmd)
	c := &child{cmd: cmd, group: groupsSupported && !r.cfg.signalChildOnly}
	if c.group && inTerminalForeground() {
		c.group = false
		r.verbosef("in a terminal's foreground: %s stays in distlock's process group, and only it is signalled", r.cfg.argv[0])
	}
	if c.group {
		setOwnGroup(cmd)
		w, err := startGroupWatcher()
		if err != nil {
			r.errorf("cannot start the watcher of %s's process group (%v): should distlock die, what %[1]s started would run on", r.cfg.argv[0], err)
		}
		c.watch = w
	}
	var watchErr, err error
	if c.watch != nil {
		c.cmd, watchErr, err = c.watch.startGated(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		c.watch.stop()
		r.errorf("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil, exitNotFound
		}
		return nil, exitCannotRun
	}
	if watchErr != nil {
		r.errorf("the watcher of %s's process group failed (%v): should distlock die, what %[1]s started would run on", r.cfg.argv[0], watchErr)
	}
	return c, 0
}

// exitStatus is the status a shell would report for the command: its exit code,
// or 128 plus the signal that killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	return exitSignalBase
}
