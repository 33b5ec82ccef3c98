package testserver

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// UnreachableAddr returns a loopback address (127.0.0.1:port) at which a
// connection attempt hangs as if a firewall dropped its SYN packets: the
// client's TCP stack retransmits them until its own timeout (about two minutes
// on Linux) or the caller's deadline. It needs no firewall rule: the address is
// a listening socket with a backlog of zero whose one queue place is taken, and
// the kernel drops the SYNs of connections it has no room for. It is closed
// when t ends.
func UnreachableAddr(t testing.TB) string {
	t.Helper()
	fd, err := tcpSocket()
	if err != nil {
		t.Fatalf("testserver: socket: %v", err)
	}
	closeFD := func() { _ = syscall.Close(fd) }
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		closeFD()
		t.Fatalf("testserver: bind: %v", err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		closeFD()
		t.Fatalf("testserver: listen: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		closeFD()
		t.Fatalf("testserver: getsockname: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Take the queue's one place; nothing ever accepts it.
	filler, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		closeFD()
		t.Fatalf("testserver: filling the queue of %s: %v", addr, err)
	}
	t.Cleanup(func() {
		_ = filler.Close()
		closeFD()
	})
	// Check that the system drops further attempts silently rather than
	// refusing them (net.ipv4.tcp_abort_on_overflow=1 would send a reset).
	probe, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		if probe != nil {
			_ = probe.Close()
		}
		t.Fatalf("testserver: a connection to %s with a full queue did not hang: %v", addr, err)
	}
	return addr
}

// SilentAddr returns a loopback address (127.0.0.1:port) that completes TCP
// connections and then never reads from them or answers, as a frozen server
// process would behind a live kernel. It is closed when t ends (the waiting
// connections are reset then).
func SilentAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: listen: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().String()
}
