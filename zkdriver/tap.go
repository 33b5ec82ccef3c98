package zkdriver

import (
	"encoding/binary"
	"net"
	"sync"
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
	seen func(sessionID int64, timeout time.Duration, passwd []byte, sent time.Time)

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
	return &tapConn{Conn: c, seen: d.sessionEstablished}, nil
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.sent.IsZero() {
		c.sent = time.Now() // go-zookeeper writes the ConnectRequest first, in one call
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
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
