package driver

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// Unreachable reports whether err says that the backend could not be reached or
// stopped answering: a connection refused, reset or aborted, a broken pipe, an
// unreachable host or network, a timeout, an end of stream, a closed
// connection. Such a failure may pass, so it is transient (ErrUnavailable).
// A host name that does not resolve is not unreachable but configuration, unless
// the lookup itself timed out. It is the one list of network failures that the
// portable layer and the drivers share; a driver adds its backend's own
// transient answers.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	var op *net.OpError // dial, read and write failures
	if errors.As(err, &op) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
