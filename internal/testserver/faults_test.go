//go:build linux

package testserver

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// Pause freezes PostgreSQL whole: the postmaster and every backend (each runs
// in a session of its own, outside the postmaster's process group), so no
// session can answer, and new connections get no reply either.
func TestPostgresPauseStopsEveryProcess(t *testing.T) {
	s := StartPostgres(t)
	ctx := context.Background()
	var backends []int
	for i := 0; i < 5; i++ {
		conn, pid, err := pgSession(ctx, s.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		backends = append(backends, pid)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })

	s.mu.Lock()
	postmaster := s.proc.cmd.Process.Pid
	s.mu.Unlock()
	all := append([]int{postmaster}, descendants(postmaster)...)
	for _, b := range backends {
		found := false
		for _, p := range all {
			found = found || p == b
		}
		if !found {
			t.Errorf("backend %d is not among the server's processes %v", b, all)
		}
	}
	// SIGSTOP takes effect asynchronously: wait, with a deadline, until every
	// process shows state T.
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range all {
		for {
			state, err := procState(p)
			if err != nil || state == 'T' {
				break // gone (an exiting helper process) or stopped
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the paused server is in state %c, not stopped", p, state)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("all %d processes of the server stopped (%d backends of clients)", len(all), len(backends))

	// And a new connection gets no answer.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := pgPing(cctx, s.URL()); err == nil {
		t.Fatal("started a session on a paused server")
	}
}

// procState is the state letter of /proc/pid/stat.
func procState(pid int) (byte, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, errors.New("malformed stat")
	}
	return stat[i+2], nil
}

// A connection to UnreachableAddr hangs until its deadline; one to SilentAddr
// connects and then gets no answer.
func TestUnreachableAndSilentAddresses(t *testing.T) {
	addr := UnreachableAddr(t)
	start := time.Now()
	_, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("dial of the unreachable address = %v after %v, want a timeout at 300ms", err, time.Since(start))
	}

	silent := SilentAddr(t)
	c, err := net.DialTimeout("tcp", silent, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello?")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read from the silent address = %d, %v; want a timeout", n, err)
	}
}
