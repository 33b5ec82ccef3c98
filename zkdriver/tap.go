package zkdriver

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
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

	mu     sync.Mutex
	sent   time.Time // when the ConnectRequest was written
	buf    []byte    // the start of the ConnectResponse, until it is complete
	parsed bool
}

// dialTap is the go-zookeeper Dialer of connections the driver owns.
func (d *Driver) dialTap(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, seen: d.sessionEstablished, wrote: &d.wire}, nil
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := c.sent.IsZero()
	if first {
		c.sent = time.Now() // go-zookeeper writes the ConnectRequest first, in one call
	}
	c.mu.Unlock()
	if !first {
		// Counted before the write: the answer may be read, and its caller
		// return, before this Write does.
		c.wrote.count(p)
	}
	n, err := c.Conn.Write(p)
	if !first && n == len(p) {
		c.wrote.written(p)
	}
	return n, err
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.observe(p[:n])
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
	passwd := append([]byte(nil), c.buf[head:head+pwLen]...)
	sent := c.sent
	c.buf = nil
	c.mu.Unlock()
	c.seen(id, timeout, passwd, sent)
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
	if len(p) < 16 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.waiting) == 0 {
		return
	}
	typ := int32(binary.BigEndian.Uint32(p[8:12]))
	n := int(int32(binary.BigEndian.Uint32(p[12:16])))
	if n < 0 || 16+n > len(p) {
		return
	}
	k := frameKey{typ, string(p[16 : 16+n])}
	for _, ch := range w.waiting[k] {
		close(ch)
	}
	delete(w.waiting, k)
}
