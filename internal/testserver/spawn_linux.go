package testserver

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// Children are started from one goroutine locked to its OS thread, with
// Pdeathsig=SIGKILL: the kernel kills a child when the thread that started it exits,
// and that thread lives until stopSpawner (after the tests) or until the test binary
// dies, however it dies. A child started from an ordinary goroutine would be killed
// whenever the Go runtime happened to retire that goroutine's thread.
var spawner struct {
	mu   sync.Mutex
	reqs chan spawnRequest // nil while no spawner runs
	done chan struct{}     // closed when the spawner goroutine has returned
}

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

// spawn starts cmd in its own process group (so that signals reach all of a server's
// processes and a terminal's ^C reaches only the test binary) and ties its life to
// the test binary's.
func spawn(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL

	spawner.mu.Lock()
	defer spawner.mu.Unlock()
	if spawner.reqs == nil {
		reqs, done := make(chan spawnRequest), make(chan struct{})
		go func() {
			// Never unlocked: when this goroutine returns its thread exits, and the
			// kernel sends SIGKILL to any child still running.
			runtime.LockOSThread()
			defer close(done)
			for r := range reqs {
				r.errc <- r.cmd.Start()
			}
		}()
		spawner.reqs, spawner.done = reqs, done
	}
	errc := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd, errc}
	return <-errc
}

// stopSpawner ends the spawner goroutine (its thread exits with it). Call it only
// after every server has been stopped; a later spawn starts a new spawner.
func stopSpawner() {
	spawner.mu.Lock()
	defer spawner.mu.Unlock()
	if spawner.reqs != nil {
		close(spawner.reqs)
		<-spawner.done
		spawner.reqs, spawner.done = nil, nil
	}
}

// descendants returns the processes below pid, read from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], child)
		}
	}
	var all []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		all = append(all, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return all
}

// killTree kills pid, its process group and its descendants with SIGKILL and waits
// until done is closed (pid reaped). The descendants, orphaned when pid dies, would
// linger as zombies until init reaps them; this process becomes a child subreaper
// meanwhile, so that it inherits and reaps them itself.
func killTree(pid int, done <-chan struct{}) {
	_ = syscall.Kill(pid, syscall.SIGSTOP) // it can start no process while we look
	kids := descendants(pid)
	if len(kids) > 0 {
		subreaper(true)
		defer subreaper(false)
	}
	for _, kid := range kids {
		_ = syscall.Kill(kid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-done
	for _, kid := range kids {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(kid, &ws, 0, nil) // ECHILD: not ours after all
	}
}

const (
	prSetChildSubreaper = 36
	prGetChildSubreaper = 37
)

var subreaperState struct {
	mu      sync.Mutex
	users   int
	already bool // the process was a subreaper before we touched it
}

// subreaper turns PR_SET_CHILD_SUBREAPER on for the first user and off after the
// last, leaving it alone if something else had set it.
func subreaper(on bool) {
	s := &subreaperState
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.users++
		if s.users == 1 {
			var cur int32
			_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prGetChildSubreaper, uintptr(unsafe.Pointer(&cur)), 0)
			s.already = cur != 0
			if !s.already {
				_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
			}
		}
		return
	}
	s.users--
	if s.users == 0 && !s.already {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
	}
}
