//go:build !linux

package pgadvisory

// sessionWatch is Linux-only (epoll); elsewhere a server's close of a lock
// session is noticed at the next refresh of its locks.
type sessionWatch struct{}

func newSessionWatch(func(*lockConn)) *sessionWatch { return nil }

func (w *sessionWatch) add(*lockConn)    {}
func (w *sessionWatch) remove(*lockConn) {}
func (w *sessionWatch) close()           {}
