package pgadvisory

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// sessionWatch learns the moment a server closes a lock session's connection:
// a crash or restart of the server, or a terminated backend, which released
// every lock of the session. Nothing reads an idle session's socket, so
// without it the loss would wait for the next refresh.
//
// It is one epoll instance per Driver with every lock connection's socket in
// it, asking only for the peer's close (EPOLLRDHUP; EPOLLHUP and EPOLLERR
// come anyway), never for data: statements and their answers do not wake it.
// The epoll instance itself is polled by the Go runtime, so waiting costs no
// thread, and closing it ends the one goroutine.
type sessionWatch struct {
	ep    *os.File
	raw   syscall.RawConn
	done  chan struct{}
	onEnd func(*lockConn)

	mu    sync.Mutex
	next  int32
	conns map[int32]*lockConn
}

// newSessionWatch starts a watch that calls onEnd for a connection whose peer
// closed it. It returns nil where the system offers no such watch.
func newSessionWatch(onEnd func(*lockConn)) *sessionWatch {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil
	}
	ep := os.NewFile(uintptr(fd), "pgadvisory-session-watch")
	raw, err := ep.SyscallConn()
	if err != nil {
		_ = ep.Close()
		return nil
	}
	w := &sessionWatch{ep: ep, raw: raw, done: make(chan struct{}), onEnd: onEnd, conns: map[int32]*lockConn{}}
	go w.run()
	return w
}

// add watches c's socket; a connection without one (from a dialer of the
// user's own) is left to the refreshes.
func (w *sessionWatch) add(c *lockConn) {
	sc := socketOf(c.net)
	if sc == nil {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns == nil { // closed
		return
	}
	w.next++
	if w.next <= 0 {
		w.next = 1
	}
	id := w.next
	// One event at most per connection (EPOLLONESHOT): a closed peer stays
	// closed, and the connection is given up at the first.
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: id}
	var ctlErr error
	err = w.raw.Control(func(ep uintptr) {
		err := rc.Control(func(fd uintptr) {
			ctlErr = syscall.EpollCtl(int(ep), syscall.EPOLL_CTL_ADD, int(fd), &ev)
		})
		if ctlErr == nil {
			ctlErr = err
		}
	})
	if err != nil || ctlErr != nil {
		return
	}
	c.watchID = id
	w.conns[id] = c
}

// remove stops watching c, before its socket is closed.
func (w *sessionWatch) remove(c *lockConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.watchID == 0 || w.conns[c.watchID] != c {
		return
	}
	delete(w.conns, c.watchID)
	c.watchID = 0
	if sc := socketOf(c.net); sc != nil {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = w.raw.Control(func(ep uintptr) {
				_ = rc.Control(func(fd uintptr) {
					_ = syscall.EpollCtl(int(ep), syscall.EPOLL_CTL_DEL, int(fd), nil)
				})
			})
		}
	}
}

// close ends the watch and waits for its goroutine.
func (w *sessionWatch) close() {
	w.mu.Lock()
	w.conns = nil
	w.mu.Unlock()
	_ = w.ep.Close() // wakes run, which returns
	<-w.done
}

func (w *sessionWatch) run() {
	defer close(w.done)
	events := make([]syscall.EpollEvent, 16)
	for {
		var n int
		err := w.raw.Read(func(ep uintptr) bool {
			var err error
			for {
				n, err = syscall.EpollWait(int(ep), events, 0)
				if !errors.Is(err, syscall.EINTR) {
					break
				}
			}
			// Nothing ready: wait until the runtime's poller says the
			// instance has events.
			return err != nil || n > 0
		})
		if err != nil {
			return // closed
		}
		for _, ev := range events[:max(n, 0)] {
			w.mu.Lock()
			c := w.conns[ev.Fd]
			delete(w.conns, ev.Fd)
			w.mu.Unlock()
			if c != nil {
				w.onEnd(c)
			}
		}
		if n < 0 {
			return
		}
	}
}
