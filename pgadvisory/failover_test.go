package pgadvisory_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// When the address the driver connects to starts leading to another server (a
// failover behind a virtual IP or DNS name, with the old primary still up),
// locks held on sessions of the old server exclude nobody who connects now. The
// driver sees the server's start time change on its next new session and
// reports every older lock lost, with the cause ErrServerChanged.
func TestLocksOnAReplacedServerAreLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	oldServer, newServer := testserver.StartPostgres(t), testserver.StartPostgres(t)
	p := startSwitch(t, addr(t, oldServer.URL()))
	// Without fencing, every connection the driver opens is a lock session.
	viaSwitch := withParam(t, withHost(t, oldServer.URL(), p.addr()), "fencing", "false")

	_, locker := openDriver(t, viaSwitch, lock.WithTTL(time.Hour)) // no refresh in the way
	held, err := locker.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	p.point(addr(t, newServer.URL())) // the failover: new connections reach the other server

	// The next lock that needs a new session finds the other server: a key held
	// on the old server is waited for on a new connection.
	oldOther := lock.New(mustOpen(t, oldServer.URL()))
	defer oldOther.Close()
	blocker, err := oldOther.Acquire(ctx, t.Name()+"/busy")
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Release(ctx)
	l, err := locker.Acquire(ctx, t.Name()+"/busy")
	if err != nil {
		t.Fatalf("Acquire, served by the new server: %v", err)
	}
	select {
	case <-held.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock held on the replaced server was not reported lost")
	}
	// The old session never ended (the old server is up and keeps it): the
	// driver learned of the loss from the new server's start time.
	if err := held.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrServerChanged) {
		t.Errorf("Err of the lock held on the replaced server = %v, want ErrLost and ErrServerChanged", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := lock.New(mustOpen(t, newServer.URL()))
	defer other.Close()
	// On the new server the key is free: the old lock excluded no one there.
	l, err = other.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatalf("the key on the new server: %v", err)
	}
	_ = l.Release(ctx)
}

// tcpSwitch forwards connections to a target that can be changed; connections
// already open keep theirs, as they would across a failover behind a virtual IP.
type tcpSwitch struct {
	l      net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startSwitch(t *testing.T, target string) *tcpSwitch {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpSwitch{l: l, target: target}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *tcpSwitch) addr() string { return s.l.Addr().String() }

func (s *tcpSwitch) point(target string) {
	s.mu.Lock()
	s.target = target
	s.mu.Unlock()
}

func (s *tcpSwitch) serve() {
	defer s.wg.Done()
	for {
		in, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		target := s.target
		s.mu.Unlock()
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		s.mu.Lock()
		s.conns = append(s.conns, in, out)
		s.mu.Unlock()
		s.wg.Add(2)
		go func() { defer s.wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
		go func() { defer s.wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
	}
}

func (s *tcpSwitch) close() {
	s.l.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func addr(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func withHost(t *testing.T, dsn, host string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = host
	return u.String()
}
