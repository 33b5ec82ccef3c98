package zkdriver_test

import (
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxy is a loopback TCP proxy between ZooKeeper clients and a server that
// reads ZooKeeper's framing, so it can break things at exact points: cut every
// connection, hold a lock node's create request, drop the reply to it with the
// connection, or swallow all traffic (a partition).
type proxy struct {
	t      *testing.T
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu        sync.Mutex
	pipes     map[*pipe]struct{}
	blackhole bool
	refuse    int           // close this many new client connections at once
	dropReply bool          // armed: drop the reply to the next lock-node create, and cut
	holdNext  bool          // armed: hold the next lock-node create request
	held      chan struct{} // closed to send the held request on
	events    chan string   // "create held", "reply dropped"
}

// pipe is one client connection and its server connection.
type pipe struct {
	client, server net.Conn
	once           sync.Once
	mu             sync.Mutex
	dropXid        int32 // reply to drop; 0 for none
}

func (p *pipe) close() {
	p.once.Do(func() {
		p.client.Close()
		p.server.Close()
	})
}

// newProxy starts a proxy to the server at target, stopped when t ends.
func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, pipes: map[*pipe]struct{}{}, events: make(chan string, 16)}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.mu.Lock()
		if p.held != nil {
			close(p.held)
			p.held = nil
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// URL is a zk:// URL through the proxy, with the given query.
func (p *proxy) URL(query string) string {
	u := "zk://" + p.ln.Addr().String()
	if query != "" {
		u += "?" + query
	}
	return u
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse > 0
		if refuse {
			p.refuse--
		}
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pp := &pipe{client: c, server: s}
		p.mu.Lock()
		p.pipes[pp] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.forward(pp, true)
		go p.forward(pp, false)
	}
}

// Cut closes every connection, as a network failure or a server's restart
// would; the clients reconnect through the proxy.
func (p *proxy) Cut() {
	p.mu.Lock()
	pipes := p.pipes
	p.pipes = map[*pipe]struct{}{}
	p.mu.Unlock()
	for pp := range pipes {
		pp.close()
	}
}

// RefuseNext makes the proxy close the next n client connections as soon as
// it accepts them, as a server that is not serving yet does: a client's
// reconnection then takes another round.
func (p *proxy) RefuseNext(n int) {
	p.mu.Lock()
	p.refuse = n
	p.mu.Unlock()
}

// SetBlackhole swallows (or again forwards) every frame in both directions,
// leaving the connections open: a partition.
func (p *proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// DropNextCreateReply arms the proxy: the next create of a lock node reaches
// the server, and its reply is dropped with the connection, so the client
// cannot know whether the create happened.
func (p *proxy) DropNextCreateReply() {
	p.mu.Lock()
	p.dropReply = true
	p.mu.Unlock()
}

// HoldNextCreate arms the proxy: the next create of a lock node is held back
// until the returned function is called.
func (p *proxy) HoldNextCreate() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdNext = true
	ch := make(chan struct{})
	p.held = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.held == ch {
				p.held = nil
				close(ch)
			}
			p.mu.Unlock()
		})
	}
}

// forward copies frames one way. The first frame each way is the connect
// handshake; after it, requests start with {xid, type} and replies with
// {xid, zxid, err}.
func (p *proxy) forward(pp *pipe, up bool) {
	defer p.wg.Done()
	defer pp.close()
	src, dst := pp.server, pp.client
	if up {
		src, dst = pp.client, pp.server
	}
	for n := 0; ; n++ {
		frame, err := readFrame(src)
		if err != nil {
			return
		}
		p.mu.Lock()
		blackhole := p.blackhole
		p.mu.Unlock()
		if blackhole {
			continue
		}
		if n > 0 && len(frame) >= 8 {
			xid := int32(binary.BigEndian.Uint32(frame))
			if up && isLockCreate(frame) {
				p.mu.Lock()
				drop, hold, held := p.dropReply, p.holdNext, p.held
				p.dropReply, p.holdNext = false, false
				p.mu.Unlock()
				if drop {
					pp.mu.Lock()
					pp.dropXid = xid
					pp.mu.Unlock()
				}
				if hold && held != nil {
					p.events <- "create held"
					<-held
				}
			}
			if !up {
				pp.mu.Lock()
				drop := pp.dropXid != 0 && pp.dropXid == xid
				pp.mu.Unlock()
				if drop {
					p.events <- "reply dropped"
					return // closes both sides: the reply is lost
				}
			}
		}
		if err := writeFrame(dst, frame); err != nil {
			return
		}
	}
}

// isLockCreate reports whether a request frame creates a lock node (create or
// create2 of a path with "-lock-").
func isLockCreate(frame []byte) bool {
	typ := int32(binary.BigEndian.Uint32(frame[4:8]))
	if typ != 1 && typ != 15 || len(frame) < 12 {
		return false
	}
	n := int(binary.BigEndian.Uint32(frame[8:12]))
	if n < 0 || 12+n > len(frame) {
		return false
	}
	return strings.Contains(string(frame[12:12+n]), "-lock-")
}

// wait waits for the proxy to report what, failing the test after a minute.
func (p *proxy) wait(what string) {
	p.t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-p.events:
			if ev == what {
				return
			}
		case <-timeout:
			p.t.Fatalf("proxy: no %q within a minute", what)
		}
	}
}
