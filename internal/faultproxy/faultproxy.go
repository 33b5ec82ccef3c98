// Package faultproxy puts a TCP proxy between one client and a server so that a
// test can cut that client off silently (a partition: traffic dropped, no reset),
// reset its connections, slow them down and heal the link again.
//
// It is a small proxy of its own rather than Toxiproxy embedded as a library:
// Toxiproxy left its pipe goroutines blocked after its proxy was stopped (the
// suite's leak check caught them at random), and it brought Prometheus, zerolog
// and gorilla/mux into the module graph for what is a few dozen lines here.
//
// Only test code imports it (through package conformance), so a program that
// imports a driver compiles none of it.
package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards a loopback port to one upstream address. Its methods are safe for
// concurrent use; Close waits for every goroutine it started.
type Proxy struct {
	upstream string
	ln       net.Listener
	wg       sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	blackhole bool          // drop every byte, both ways
	latency   time.Duration // delay every chunk by this much
	links     map[*link]struct{}
}

// link is one client connection and its upstream connection.
type link struct {
	client, server net.Conn
	dropped        bool // lost bytes to a blackhole: closed by Heal
}

func (l *link) close() {
	l.client.Close()
	l.server.Close()
}

// Start starts a proxy on a free 127.0.0.1 port in front of upstream (host:port).
func Start(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening for a proxy to %s: %w", upstream, err)
	}
	p := &Proxy{upstream: upstream, ln: ln, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, to give the client in place of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Blackhole drops every byte in both directions from now on, without closing or
// resetting anything: the client's connections stay open and hear nothing, and a
// new connection is accepted but hears nothing either, as behind a network that
// silently lost its route. Heal ends it.
func (p *Proxy) Blackhole() error {
	return p.set(func() { p.blackhole = true })
}

// Latency delays every chunk of data by d in each direction, so a round trip takes
// 2d longer. Heal ends it.
func (p *Proxy) Latency(d time.Duration) error {
	return p.set(func() { p.latency = d })
}

// Reset closes every connection through the proxy at once, as a crashed router or
// a killed connection tracker would; the client sees its connections end and may
// connect again through the same address.
func (p *Proxy) Reset() error {
	return p.set(func() {
		for l := range p.links {
			l.close()
		}
	})
}

// Heal removes every fault. Connections whose traffic was dropped by Blackhole are
// closed (their byte streams lost data, so no protocol could go on over them); the
// client connects again and is heard from then on.
func (p *Proxy) Heal() error {
	return p.set(func() {
		p.blackhole, p.latency = false, 0
		for l := range p.links {
			if l.dropped {
				l.close()
			}
		}
	})
}

// Close stops the proxy, closes every connection through it and waits for its
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for l := range p.links {
		l.close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
	return nil
}

var errClosed = errors.New("faultproxy: proxy is closed")

func (p *Proxy) set(f func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%w (to %s)", errClosed, p.upstream)
	}
	f()
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.connect(c)
	}
}

// connect dials the upstream for a new client connection and pipes both ways.
func (p *Proxy) connect(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		c.Close() // as a refused upstream: the client sees its connection end
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go p.pipe(l, s, c, done)
	go p.pipe(l, c, s, done)
	<-done
	// One direction ended: end the other and forget the link.
	l.close()
	<-done
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, dropping or delaying each as the
// proxy's faults say at the moment it arrives.
func (p *Proxy) pipe(l *link, dst, src net.Conn, done chan<- struct{}) {
	defer p.wg.Done()
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop, delay := p.blackhole, p.latency
			if drop {
				l.dropped = true
			}
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if !drop {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
