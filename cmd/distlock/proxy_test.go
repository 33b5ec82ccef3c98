package main

import (
	"net"
	"sync"
	"testing"
)

// partitionProxy forwards TCP connections to a server until Partition, which
// holds every byte in both directions (nothing is dropped, no RST, no FIN: a
// silent partition, as a cut cable or a dropping firewall looks to both sides)
// until Heal. It is a few lines rather than toxiproxy because these tests need
// nothing else from a proxy and the module does not depend on toxiproxy (yet).
type partitionProxy struct {
	ln     net.Listener
	target string
	closed chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	gate  chan struct{} // closed while traffic flows
	conns []net.Conn
}

// startProxy listens on a free loopback port and forwards to target (host:port)
// until t ends.
func startProxy(t *testing.T, target string) *partitionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{ln: ln, target: target, closed: make(chan struct{}), gate: make(chan struct{})}
	close(p.gate)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *partitionProxy) Addr() string { return p.ln.Addr().String() }

// Partition holds all traffic from now on, on open and new connections alike.
func (p *partitionProxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already partitioned
	}
}

// Heal lets the held traffic through and forwards again.
func (p *partitionProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *partitionProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		select {
		case <-p.closed:
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		default:
		}
		p.conns = append(p.conns, c, s)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

// pipe copies src to dst, holding each chunk while partitioned.
func (p *partitionProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits until traffic may flow; false if the proxy closed meanwhile.
func (p *partitionProxy) pass() bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-p.closed:
		return false
	}
}

func (p *partitionProxy) close() {
	p.mu.Lock()
	close(p.closed)
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}
