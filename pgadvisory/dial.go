package pgadvisory

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Lock sessions are opened by the driver itself, with the configuration of the
// pool it was given (or made from the URL), its BeforeConnect and AfterConnect
// hooks included, but not through the pool: a pool creates connections in the
// background, beyond the context of the call that asked for one, and counts
// them against its capacity until they are hijacked.

// defaultConnectTimeout bounds one attempt to open a session (dial, TLS,
// authentication) when the connection string sets no connect_timeout, and the
// setup statement that follows; a call's own context may end it sooner.
const defaultConnectTimeout = 10 * time.Second

func (d *Driver) connectTimeout() time.Duration {
	if t := d.cfg.ConnConfig.ConnectTimeout; t > 0 {
		return t
	}
	return defaultConnectTimeout
}

// connect opens a connection with the driver's configuration, within ctx and
// the connect timeout.
func (d *Driver) connect(ctx context.Context) (*pgx.Conn, error) {
	cc := d.cfg.ConnConfig.Copy()
	cc.ConnectTimeout = d.connectTimeout()
	if d.cfg.BeforeConnect != nil {
		if err := d.cfg.BeforeConnect(ctx, cc); err != nil {
			return nil, err
		}
	}
	dial := cc.DialFunc
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
	}
	cc.DialFunc = d.sockets.wrap(dial)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if d.cfg.AfterConnect != nil {
		if err := d.cfg.AfterConnect(ctx, conn); err != nil {
			closeQuickly(conn)
			return nil, err
		}
	}
	return conn, nil
}

// closeQuickly closes conn, giving the goodbye to the server at most
// closeTimeout (it is one small write, which a frozen server's socket buffer
// takes at once).
func closeQuickly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	_ = conn.Close(ctx)
	cancel()
}

// sockets are the network connections the driver dialed: those of its sessions
// and those of the cancel requests pgx sends for them (pgx's clean-up of a
// connection that failed gives its cancel request up to 15 seconds). Close
// closes every one at once, so that neither the driver nor pgx waits on a
// server that does not answer, and no dial succeeds after it.
type sockets struct {
	ctx    context.Context // ends when closeAll is called, and with it dials under way
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	open   map[*trackedConn]struct{}
}

func (s *sockets) init() { s.ctx, s.cancel = context.WithCancel(context.Background()) }

// wrap returns dial, tracked.
func (s *sockets) wrap(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errClosed
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		t := &trackedConn{Conn: nc, s: s}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			_ = nc.Close()
			return nil, errClosed
		}
		if s.open == nil {
			s.open = map[*trackedConn]struct{}{}
		}
		s.open[t] = struct{}{}
		return t, nil
	}
}

// closeAll closes every connection still open and refuses later dials.
func (s *sockets) closeAll() {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for t := range open {
		_ = t.Conn.Close()
	}
}

// trackedConn is a dialed connection that leaves the set when closed.
type trackedConn struct {
	net.Conn
	s *sockets
}

func (t *trackedConn) Close() error {
	t.s.mu.Lock()
	delete(t.s.open, t)
	t.s.mu.Unlock()
	return t.Conn.Close()
}

// NetConn returns the connection the dialer made, as tls.Conn.NetConn does.
func (t *trackedConn) NetConn() net.Conn { return t.Conn }

// socketOf finds the socket under c, unwrapping TLS and the tracking, or nil
// when there is none (a connection from a dialer of the user's own).
func socketOf(c net.Conn) syscall.Conn {
	for range 8 {
		if sc, ok := c.(syscall.Conn); ok {
			return sc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		if c = u.NetConn(); c == nil {
			return nil
		}
	}
	return nil
}
