package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// startTimeout bounds how long a server may take to answer after it started.
	// Generous: go test ./... starts several servers at once on small machines.
	startTimeout = 60 * time.Second
	// stopTimeout bounds a graceful stop before the server is killed.
	stopTimeout = 30 * time.Second
	// probeInterval is the pause between two readiness probes.
	probeInterval = 20 * time.Millisecond
	// portAttempts is how many times a start is tried on fresh ports when another
	// process took the port between picking and binding it.
	portAttempts = 3
)

// Server is a server process owned by a test: StartRedis, StartPostgres, StartEtcd,
// StartZooKeeper, EtcdCluster, ZooKeeperEnsemble and RedisServers make them. It keeps
// its port and directory across Stop, Kill and Restart, and is removed with its data
// when the test ends. Its methods are safe for concurrent use.
type Server struct {
	name string // what runs: "redis-server", "postgres", "etcd", "zookeeper"
	url  string
	addr string // 127.0.0.1:port of the client port
	dir  string // removed by close
	log  string // the server's stdout and stderr

	command    func() *exec.Cmd
	probe      func(ctx context.Context) error // nil when the server answers
	stopSignal syscall.Signal                  // graceful stop
	save       func(ctx context.Context) error // before a graceful stop that keeps data; may be nil
	wipe       func() error                    // forget all data while stopped; nil: not supported

	mu     sync.Mutex
	proc   *process // nil while stopped
	closed bool
}

// URL returns the server's connection URL, the same across restarts.
func (s *Server) URL() string { return s.url }

// Addr returns the server's client address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return s.addr }

// Stop stops the server gracefully (SIGTERM, or PostgreSQL's fast shutdown) and waits
// until it has exited; a paused server is resumed first. Clients see their connections
// closed by the server. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop(false)
}

// Kill kills the server and all its processes with SIGKILL, as a crash would, and
// waits until it has exited. Data not yet written to disk is lost (a Redis without
// persistence loses everything).
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	s.proc.kill()
	s.proc = nil
	return nil
}

// Pause freezes the server and all its processes with SIGSTOP: it keeps its connections
// open but answers nothing until Resume, like a long GC pause or a stalled machine.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("testserver: %s on %s is not running", s.name, s.addr)
	}
	return s.proc.signalAll(sig)
}

// Restart stops the server if it runs (gracefully, as Stop) and starts it again on the
// same port, returning once it answers. With keepData it keeps what the server had
// stored: Redis saves a snapshot before a graceful stop and loads it (after Kill there
// is nothing to load), PostgreSQL, etcd and ZooKeeper keep their data directory.
// Without keepData the server starts empty, as a replacement machine would; an etcd
// cluster member does not support that.
//
// A cluster member answers only once its cluster has a quorum: after stopping a
// majority, restart members concurrently.
func (s *Server) Restart(keepData bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("testserver: %s on %s: restart after the test ended", s.name, s.addr)
	}
	if !keepData && s.wipe == nil {
		return fmt.Errorf("testserver: %s on %s cannot restart without its data", s.name, s.addr)
	}
	if err := s.stop(keepData); err != nil {
		return err
	}
	if !keepData {
		if err := s.wipe(); err != nil {
			return fmt.Errorf("testserver: %s on %s: removing data: %w", s.name, s.addr, err)
		}
	}
	if err := s.launch(); err != nil {
		return err
	}
	return s.waitReady()
}

// stop stops the process gracefully; with save, it first asks the server to save its
// data (Redis). s.mu is held.
func (s *Server) stop(save bool) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	_ = p.signalAll(syscall.SIGCONT)
	if save && s.save != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		err := s.save(ctx)
		cancel()
		if err != nil {
			p.kill()
			return fmt.Errorf("testserver: %s on %s: saving data before stop: %w", s.name, s.addr, err)
		}
	}
	if err := p.cmd.Process.Signal(s.stopSignal); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.kill()
		return fmt.Errorf("testserver: stopping %s on %s: %w", s.name, s.addr, err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		p.kill()
		return fmt.Errorf("testserver: %s on %s did not stop within %v; killed it\n%s",
			s.name, s.addr, stopTimeout, s.logTail())
	}
}

// launch starts the process without waiting for it to answer. s.mu is held or s is
// not yet shared.
func (s *Server) launch() error {
	p, err := startProcess(s.command(), s.log)
	if err != nil {
		return fmt.Errorf("testserver: starting %s: %w", s.name, err)
	}
	s.proc = p
	return nil
}

// waitReady polls the readiness probe until it succeeds, the process exits or
// startTimeout passes. s.mu is held or s is not yet shared.
func (s *Server) waitReady() error {
	p := s.proc
	deadline := time.Now().Add(startTimeout)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-p.done:
			s.proc = nil
			return &exitedError{fmt.Sprintf("testserver: %s on %s exited before answering (%v)\n%s",
				s.name, s.addr, p.err, s.logTail())}
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.probe(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			s.proc = nil
			return fmt.Errorf("testserver: %s on %s did not answer within %v: %v\n%s",
				s.name, s.addr, startTimeout, err, s.logTail())
		}
		timer.Reset(probeInterval)
	}
}

// exitedError is a server that exited while starting; addrInUse tells whether a
// retry on another port can help.
type exitedError struct{ msg string }

func (e *exitedError) Error() string { return e.msg }

func addrInUse(err error) bool {
	var ee *exitedError
	return errors.As(err, &ee) && strings.Contains(strings.ToLower(ee.msg), "address already in use")
}

// close kills the server and removes its directory. It runs when the owning test (or,
// for a shared server, the test binary) ends.
func (s *Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A graceful stop lets the server clean up after itself (PostgreSQL removes
	// its shared memory segment); stop kills it if that does not work.
	_ = s.stop(false)
	s.closed = true
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// logTail returns the last lines of the server's log, indented, for error messages.
func (s *Server) logTail() string {
	const lines = 25
	data, err := os.ReadFile(s.log)
	if err != nil {
		return "  (no server log: " + err.Error() + ")"
	}
	data = bytes.TrimRight(data, "\n")
	all := strings.Split(string(data), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "  last lines of the " + s.name + " log:\n    " + strings.Join(all, "\n    ")
}

// process is a running child and the means to wait for it.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // the exit status, once done is closed
}

// startProcess starts cmd in its own process group with its output appended to
// logPath, tied to the life of the test binary (see spawn).
func startProcess(cmd *exec.Cmd, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := spawn(cmd); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// signalAll sends sig to the server's process group and to every descendant (a
// PostgreSQL backend runs in a session of its own). For SIGSTOP the server is
// stopped first, so that it cannot start a process meanwhile.
func (p *process) signalAll(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("process %d has exited", p.cmd.Process.Pid)
	default:
	}
	pid := p.cmd.Process.Pid
	if sig == syscall.SIGSTOP {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	for _, child := range descendants(pid) {
		_ = syscall.Kill(child, sig)
	}
	return syscall.Kill(-pid, sig)
}

// kill kills the server and its descendants and waits for the server to exit.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	killTree(p.cmd.Process.Pid, p.done)
}

// run runs a short-lived command (such as initdb) to completion, tied to the test
// binary like the servers, and returns its combined output.
func run(cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := spawn(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return out.Bytes(), err
}

// freePorts returns n distinct loopback ports that were free a moment ago. Another
// process may take one before the server binds it: callers retry on "address already
// in use".
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// makeDir makes a server's temporary directory. It is directly under /tmp to keep
// Unix socket paths short (PostgreSQL's socket lives there), and named after the
// process so that directories of test binaries that died are removed by later runs.
func makeDir(kind string) (string, error) {
	sweepOnce.Do(sweep)
	return os.MkdirTemp(tmpBase(), dirPrefix+kind+"-"+strconv.Itoa(os.Getpid())+"-")
}

const dirPrefix = "distlock-"

func tmpBase() string {
	if fi, err := os.Stat("/tmp"); err == nil && fi.IsDir() {
		return "/tmp"
	}
	return os.TempDir()
}

var sweepOnce sync.Once

// sweep removes the directories of test binaries that no longer run (killed before
// they could clean up). Their servers died with them.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(tmpBase(), dirPrefix+"*-*-*"))
	for _, dir := range dirs {
		parts := strings.Split(filepath.Base(dir), "-")
		pid, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}
