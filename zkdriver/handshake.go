package zkdriver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/lock/driver"
)

// Open makes the first session itself, within its context, before it starts
// go-zookeeper: go-zookeeper's connect handshake has no context, and once
// started, go-zookeeper can only be stopped by its Close, which waits up to a
// second for the answer to a close request that a connection still in its
// handshake never sends. So Open dials, sends the ConnectRequest go-zookeeper
// would send for a new session, and reads the answer, all under its context;
// if the context ends first it closes the socket and returns at once, with no
// goroutine to wait for. Once a server has answered, go-zookeeper is started
// with that server first in its list, and its first dial gets this connection:
// go-zookeeper's ConnectRequest is not sent again, and the server's answer is
// handed to it as if it had just arrived (tapConn.replay). Later connections
// are go-zookeeper's own.

// emptyPassword is the session password of a ConnectRequest for a new session,
// as go-zookeeper sends it.
var emptyPassword = make([]byte, 16)

// connectRequest is the frame of a ConnectRequest for a new session (jute:
// int32 length, int32 protocolVersion, int64 lastZxidSeen, int32 timeOut,
// int64 sessionId, buffer passwd).
func connectRequest(timeout time.Duration) []byte {
	body := binary.BigEndian.AppendUint32(nil, 0) // protocolVersion
	body = binary.BigEndian.AppendUint64(body, 0) // lastZxidSeen
	body = binary.BigEndian.AppendUint32(body, uint32(timeout/time.Millisecond))
	body = binary.BigEndian.AppendUint64(body, 0) // sessionId: a new session
	body = binary.BigEndian.AppendUint32(body, uint32(len(emptyPassword)))
	body = append(body, emptyPassword...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// maxConnectResponse bounds the answer to a ConnectRequest (a few dozen bytes).
const maxConnectResponse = 1 << 10

// firstSession opens a session on one of servers, trying each in turn (each
// for at most two thirds of the session timeout, go-zookeeper's own read
// timeout, so that one frozen server does not keep Open from the others),
// until ctx ends or connectTimeout passes. It returns the connection, with the
// server's answer to replay to go-zookeeper. When every server refused the
// connection in a round (nothing listens there), it fails at once with the
// last refusal: that is an answer, and waiting would only hide it. A server
// that accepts and does not answer (frozen, overloaded), or a dial that times
// out (SYNs dropped), is waited for.
func (d *Driver) firstSession(parent context.Context, servers []string, sessionTimeout, connectTimeout time.Duration) (*tapConn, error) {
	ctx, cancel := context.WithTimeout(parent, connectTimeout)
	defer cancel()
	req := connectRequest(sessionTimeout)
	var last error
	for round := 0; ; round++ {
		if round > 0 {
			// Every server failed: pause as go-zookeeper does between rounds.
			t := time.NewTimer(time.Second)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		refused := 0
		for _, addr := range servers {
			if ctx.Err() != nil {
				break
			}
			tc, err := d.tryHandshake(ctx, addr, req, sessionTimeout*2/3)
			if err == nil {
				return tc, nil
			}
			last = err
			if errors.Is(err, syscall.ECONNREFUSED) {
				refused++
			}
		}
		if err := parent.Err(); err != nil {
			return nil, err
		}
		if refused == len(servers) {
			return nil, fmt.Errorf("%w: every server refused the connection: %w", driver.ErrUnavailable, last)
		}
		if ctx.Err() != nil {
			if last == nil {
				last = errors.New("no server answered")
			}
			return nil, fmt.Errorf("%w: no ZooKeeper session within %v (connect_timeout): %w", driver.ErrUnavailable, connectTimeout, last)
		}
	}
}

// tryHandshake dials addr and sends req, within ctx and at most limit.
func (d *Driver) tryHandshake(ctx context.Context, addr string, req []byte, limit time.Duration) (*tapConn, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The socket's deadline follows ctx: at its deadline, or at once when it
	// is cancelled.
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	stop := context.AfterFunc(ctx, func() {
		defer wg.Done()
		_ = c.SetDeadline(time.Unix(1, 0))
	})
	defer func() {
		if stop() {
			wg.Done()
		}
		wg.Wait()
	}()
	sent := time.Now()
	resp, err := exchange(c, req)
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w (%w)", addr, err, ctx.Err())
		}
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if len(resp) < 4+20 || binary.BigEndian.Uint64(resp[12:20]) == 0 {
		c.Close()
		return nil, fmt.Errorf("%s: the server gave no session", addr)
	}
	_ = c.SetDeadline(time.Time{})
	return &tapConn{Conn: c, seen: d.sessionEstablished, wrote: &d.wire, set: &d.conns, hs: &d.handshakes,
		addr: addr, released: make(chan struct{}), sent: sent, replay: resp}, nil
}

// exchange writes req and reads one length-prefixed frame, which it returns
// with its length.
func exchange(c net.Conn, req []byte) ([]byte, error) {
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, fmt.Errorf("connect handshake: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxConnectResponse {
		return nil, fmt.Errorf("connect handshake: answer of %d bytes: not ZooKeeper", size)
	}
	resp := make([]byte, 4+size)
	copy(resp, n[:])
	if _, err := io.ReadFull(c, resp[4:]); err != nil {
		return nil, fmt.Errorf("connect handshake: %w", err)
	}
	return resp, nil
}

// hostList is the go-zookeeper HostProvider of a Driver from Open: the servers
// as the driver resolved them, the one that gave the first session first,
// tried in turn. A round through all of them without a session makes
// go-zookeeper pause a second (retryStart), as with its own provider.
type hostList struct {
	first string

	mu         sync.Mutex
	servers    []string
	curr, last int
}

func (h *hostList) Init(servers []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	for i, s := range h.servers {
		if s == h.first {
			h.servers[0], h.servers[i] = h.servers[i], h.servers[0]
			break
		}
	}
	h.curr, h.last = -1, -1
	if len(h.servers) == 0 {
		return errors.New("zkdriver: no servers")
	}
	return nil
}

func (h *hostList) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

func (h *hostList) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart := h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

func (h *hostList) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}
