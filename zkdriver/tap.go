package zkdriver

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// go-zookeeper keeps the session timeout the server negotiated to itself, and the
// driver needs it: a lock must count as lost once the session could have expired
// on the server, and the server may have lowered the timeout the client asked
// for. So the connections the driver dials itself go through tapConn, which reads
// the first frame of each connection, the ConnectResponse of ZooKeeper's wire
// protocol (jute: int32 length, int32 protocolVersion, int32 timeOut, int64
// sessionId, buffer passwd), and passes everything on untouched.

// tapConn is a client connection whose connect handshake the driver watches.
type tapConn struct {
	net.Conn
	seen  func(sessionID int64, timeout time.Duration, passwd []byte, sent time.Time)
	wrote *wire
	set   *connSet
	hs    *handshakes
	addr  string // the server, as go-zookeeper names it

	mu          sync.Mutex
	replay      []byte    // the answer to a handshake the driver made itself, to hand to go-zookeeper
	sent        time.Time // when the ConnectRequest was written
	buf         []byte    // the start of the ConnectResponse, until it is complete
	parsed      bool
	established bool          // the handshake gave a session
	released    chan struct{} // closed once go-zookeeper's Close of it has returned
	releaseOnce sync.Once
}

// dialTap is the go-zookeeper Dialer of connections the driver owns. Dials end
// when the driver closes, and none starts after that.
func (d *Driver) dialTap(network, address string, timeout time.Duration) (net.Conn, error) {
	d.held.Lock()
	pre := d.pre
	if pre != nil && pre.addr == address {
		d.pre = nil
	} else {
		pre = nil
	}
	d.held.Unlock()
	if pre != nil { // the connection of Open's own handshake (handshake.go)
		if !d.conns.add(pre) {
			pre.Conn.Close()
			return nil, net.ErrClosed
		}
		return pre, nil
	}
	dialer := net.Dialer{Timeout: timeout}
	c, err := dialer.DialContext(d.ctx, network, address)
	if err != nil {
		if d.ctx.Err() == nil {
			d.handshakes.unreachable(address)
		}
		return nil, err
	}
	tc := &tapConn{Conn: c, seen: d.sessionEstablished, wrote: &d.wire, set: &d.conns, hs: &d.handshakes, addr: address, released: make(chan struct{})}
	if !d.conns.add(tc) {
		c.Close()
		return nil, net.ErrClosed
	}
	return tc, nil
}

// Close is go-zookeeper's close of the connection.
func (c *tapConn) Close() error {
	err := c.Conn.Close()
	c.set.remove(c)
	c.releaseOnce.Do(func() { close(c.released) })
	return err
}

// go-zookeeper's goroutines end only when a read or write on the connection
// fails or the server answers its close request, and it gives up waiting for
// that answer after a second. On a server that answers nothing (frozen,
// partitioned) a read fails after two thirds of the session timeout, and ten
// times that during a connect handshake: its goroutines would outlive Close by
// that much. So the driver keeps the connections it dialled and closes them
// itself (connSet.abort), which ends every read and write at once.
//
// The goroutine that runs go-zookeeper's send loop closes its connection as the
// last thing it does, after go-zookeeper's main loop may already have ended;
// connSet.wait waits for that close of each connection that got a session.

// connSet is the connections the driver dialled and go-zookeeper has not closed.
type connSet struct {
	mu      sync.Mutex
	live    map[*tapConn]struct{}
	aborted bool
}

// add records a new connection, or reports false if the driver is closing.
func (s *connSet) add(c *tapConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aborted {
		return false
	}
	if s.live == nil {
		s.live = map[*tapConn]struct{}{}
	}
	s.live[c] = struct{}{}
	return true
}

func (s *connSet) remove(c *tapConn) {
	s.mu.Lock()
	delete(s.live, c)
	s.mu.Unlock()
}

// abort closes every connection, without waiting for the server, and refuses
// new ones. Connections stay in the set until go-zookeeper closes them too.
func (s *connSet) abort() {
	s.mu.Lock()
	s.aborted = true
	live := make([]*tapConn, 0, len(s.live))
	for c := range s.live {
		live = append(live, c)
	}
	s.mu.Unlock()
	for _, c := range live {
		_ = c.Conn.Close()
	}
}

// wait waits, at most for limit, until go-zookeeper has closed every
// connection that got a session (and so ran a send loop); it is called once
// go-zookeeper's main loop has ended. A connection whose handshake failed was
// closed by that loop, or never will be.
func (s *connSet) wait(limit time.Duration) {
	s.mu.Lock()
	var pending []*tapConn
	for c := range s.live {
		c.mu.Lock()
		if c.established {
			pending = append(pending, c)
		}
		c.mu.Unlock()
	}
	s.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	for _, c := range pending {
		select {
		case <-c.released:
		case <-t.C:
			return
		}
	}
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := c.sent.IsZero()
	if first {
		c.sent = time.Now() // go-zookeeper writes the ConnectRequest first, in one call
	}
	swallow := c.replay != nil && !c.parsed
	c.mu.Unlock()
	if swallow {
		// The driver made this handshake already; the server's answer
		// waits in c.replay.
		return len(p), nil
	}
	if first {
		return c.Conn.Write(c.hs.connectRequest(p))
	}
	// Counted before the write: the answer may be read, and its caller
	// return, before this Write does.
	c.wrote.count(p)
	n, err := c.Conn.Write(p)
	if n == len(p) {
		c.wrote.written(p)
	}
	return n, err
}

func (c *tapConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		c.mu.Unlock()
		c.observe(p[:n])
		return n, nil
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.observe(p[:n])
	} else if err != nil {
		c.mu.Lock()
		refused := !c.sent.IsZero() && !c.parsed && len(c.buf) == 0
		c.mu.Unlock()
		// The server closed the connection after our ConnectRequest without
		// a word. (A read that times out, or a connection the driver closed,
		// is no refusal.)
		if refused && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			c.hs.refused(c.addr)
		}
	}
	return n, err
}

// observe collects the ConnectResponse and reports it once complete.
func (c *tapConn) observe(p []byte) {
	c.mu.Lock()
	if c.parsed {
		c.mu.Unlock()
		return
	}
	c.buf = append(c.buf, p...)
	const head = 4 + 4 + 4 + 8 + 4 // length, protocolVersion, timeOut, sessionId, passwd length
	if len(c.buf) < head {
		c.mu.Unlock()
		return
	}
	pwLen := int(int32(binary.BigEndian.Uint32(c.buf[20:24])))
	if pwLen < 0 {
		pwLen = 0
	}
	if len(c.buf) < head+pwLen {
		c.mu.Unlock()
		return
	}
	c.parsed = true
	timeout := time.Duration(int32(binary.BigEndian.Uint32(c.buf[8:12]))) * time.Millisecond
	id := int64(binary.BigEndian.Uint64(c.buf[12:20]))
	c.established = id != 0
	c.hs.answered()
	passwd := append([]byte(nil), c.buf[head:head+pwLen]...)
	sent := c.sent
	c.buf = nil
	c.mu.Unlock()
	c.seen(id, timeout, passwd, sent)
}

// A ZooKeeper server refuses to resume a session with a client that has seen
// a later transaction than the server has (its last zxid): it closes the
// connection after the ConnectRequest without an answer, so that the client
// tries another server of the ensemble instead of reading older data from a
// lagging one. A server that lost its data (restarted empty, or restored from
// an old backup) refuses this way too, and has forgotten the session and its
// locks, which it may already have given to other clients; but go-zookeeper
// keeps presenting the same last zxid, is refused over and over, and never
// learns that the session is gone. So once every server has refused the
// driver's ConnectRequest since the last answered one (a server that cannot
// be reached at all cannot contradict them), the driver presents zero as its
// last zxid: a server that knows the session resumes it (a lagging server's
// older data is the price, for that one reconnection; whether the session
// lives is the leader's word, not the lagging server's), and one that does not
// answers that it expired, which ends the session's locks at once.

// handshakes counts refused ConnectRequests.
type handshakes struct {
	mu      sync.Mutex
	servers int             // distinct servers go-zookeeper may dial; 0: unknown
	refusal map[string]bool // since the last answer: true refused, false unreachable
}

// refused records a ConnectRequest that addr closed the connection on.
func (h *handshakes) refused(addr string) { h.record(addr, true) }

// unreachable records a failed dial of addr.
func (h *handshakes) unreachable(addr string) { h.record(addr, false) }

func (h *handshakes) record(addr string, refused bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refusal == nil {
		h.refusal = map[string]bool{}
	}
	h.refusal[addr] = refused || h.refusal[addr]
}

// answered records an answered ConnectRequest.
func (h *handshakes) answered() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.refusal)
}

// connectRequest returns the ConnectRequest frame to send for go-zookeeper's p:
// p itself, or, once every server has refused or could not be reached, and at
// least one refused, a copy that presents zero as the last zxid seen. (The
// frame: int32 length, int32 protocolVersion, int64 lastZxidSeen, ...)
func (h *handshakes) connectRequest(p []byte) []byte {
	h.mu.Lock()
	refusals := 0
	for _, refused := range h.refusal {
		if refused {
			refusals++
		}
	}
	forget := h.servers > 0 && refusals > 0 && len(h.refusal) >= h.servers
	h.mu.Unlock()
	if !forget || len(p) < 16 {
		return p
	}
	q := append([]byte(nil), p...)
	clear(q[8:16])
	return q
}

// wire tells the driver when a request is on its way to the server, so that it
// can send the next one of a sequence without waiting for the reply: the server
// handles a session's requests in the order they arrive, and go-zookeeper writes
// them in the order they are queued, but queues each from its caller's
// goroutine. After each request frame (go-zookeeper writes one per Write call:
// int32 length, int32 xid, int32 type, then for path operations the path as an
// int32 length and bytes) the tap wakes whoever waits for that type and path.
type wire struct {
	requests atomic.Int64 // requests written, pings aside
	mu       sync.Mutex
	waiting  map[frameKey][]chan struct{}
}

type frameKey struct {
	typ  int32
	path string
}

// Request types, from ZooKeeper's ZooDefs.OpCode.
const (
	opCreate          = 1
	opGetData         = 4
	opCreateContainer = 19
	opPing            = 11
	opCloseSession    = -11
)

// expect returns a channel closed once a request of type typ on path has been
// written to the connection.
func (w *wire) expect(typ int32, path string) chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	if w.waiting == nil {
		w.waiting = map[frameKey][]chan struct{}{}
	}
	k := frameKey{typ, path}
	w.waiting[k] = append(w.waiting[k], ch)
	w.mu.Unlock()
	return ch
}

// forget drops a wait that is no longer needed.
func (w *wire) forget(typ int32, path string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := frameKey{typ, path}
	chans := w.waiting[k]
	for i, c := range chans {
		if c == ch {
			chans = append(chans[:i], chans[i+1:]...)
			break
		}
	}
	if len(chans) == 0 {
		delete(w.waiting, k)
	} else {
		w.waiting[k] = chans
	}
}

// count counts a request about to be written, pings aside; go-zookeeper
// writes each request with one call.
func (w *wire) count(p []byte) {
	if len(p) >= 16 && int32(binary.BigEndian.Uint32(p[8:12])) != opPing {
		w.requests.Add(1)
	}
}

func (w *wire) written(p []byte) {
	if len(p) < 12 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.waiting) == 0 {
		return
	}
	typ := int32(binary.BigEndian.Uint32(p[8:12]))
	var path string
	if typ != opCloseSession { // the close request has no path
		if len(p) < 16 {
			return
		}
		n := int(int32(binary.BigEndian.Uint32(p[12:16])))
		if n < 0 || 16+n > len(p) {
			return
		}
		path = string(p[16 : 16+n])
	}
	k := frameKey{typ, path}
	for _, ch := range w.waiting[k] {
		close(ch)
	}
	delete(w.waiting, k)
}
