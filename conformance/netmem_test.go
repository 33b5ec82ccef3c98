package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"os"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// netmem is a lock backend over TCP for the suite's own tests: a server in the
// test process (the store, as memdriver keeps it) and a driver that speaks to it
// with net/rpc. Being a real network server it can be frozen, restarted with or
// without its locks, cut off through the fault proxy and reached from holder
// processes, so every fault property runs against it in a second; the broken
// kinds (netmemBrokenEnv) each break one promise. The counters (fencing) survive
// a restart, as a PostgreSQL sequence does.

// netmemDowntime is how long a restart keeps the server away.
const netmemDowntime = 300 * time.Millisecond

const (
	netmemScheme    = "netmem"
	netmemBrokenEnv = "DISTLOCK_CONFORMANCE_NETMEM_BROKEN"
)

func netmemBroken(kind string) bool { return os.Getenv(netmemBrokenEnv) == kind }

func init() {
	driver.Register(netmemScheme, func(ctx context.Context, cfg driver.Config) (driver.Driver, error) {
		if len(cfg.URL.Query()) > 0 {
			return nil, fmt.Errorf("%w: netmem: unknown URL parameters %v", driver.ErrInvalidURL, cfg.URL.Query())
		}
		return dialNetmem(ctx, cfg.URL.Host)
	})
}

// netmemServer plays the backend.
type netmemServer struct {
	addr string

	mu       sync.Mutex
	cond     *sync.Cond // signalled on thaw
	frozen   bool
	runID    int
	locks    map[string]netmemEntry
	counters map[string]uint64
	ln       net.Listener
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

type netmemEntry struct {
	Owner   string
	Token   uint64
	Expires time.Time
}

// NetmemArgs and NetmemReply are the RPC messages.
type NetmemArgs struct {
	Key, Owner string
	TTL        time.Duration
	Extend     bool
}

type NetmemReply struct {
	Token uint64
	RunID int
}

func startNetmem() (*netmemServer, error) {
	s := &netmemServer{locks: map[string]netmemEntry{}, counters: map[string]uint64{}, conns: map[net.Conn]struct{}{}}
	s.cond = sync.NewCond(&s.mu)
	if err := s.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *netmemServer) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().String()
	s.runID++
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			// A service per connection, so that Block ends with it.
			wc := &watchedConn{Conn: c, gone: make(chan struct{})}
			srv := rpc.NewServer()
			if err := srv.RegisterName("Netmem", &netmemService{s: s, gone: wc.gone}); err != nil {
				panic(err)
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				srv.ServeConn(wc)
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
		}
	}()
	return nil
}

// stop closes the listener and every connection, as a dying server would.
func (s *netmemServer) stop() {
	s.mu.Lock()
	s.frozen = false
	s.cond.Broadcast()
	_ = s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// restart stops the server and listens again on its address; without keep it
// forgets every lock (the counters stay).
func (s *netmemServer) restart(keep bool) error {
	s.stop()
	s.mu.Lock()
	if !keep {
		s.locks = map[string]netmemEntry{}
		if netmemBroken("reset-counters") {
			s.counters = map[string]uint64{}
		}
	}
	s.mu.Unlock()
	// Down for a while, as a real restart is: clients meet refused connections.
	time.Sleep(netmemDowntime)
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment
		if err = s.listen(s.addr); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func (s *netmemServer) freeze(on bool) {
	s.mu.Lock()
	s.frozen = on
	s.cond.Broadcast()
	s.mu.Unlock()
}

// enter waits while the server is frozen and returns with s.mu held.
func (s *netmemServer) enter() {
	s.mu.Lock()
	for s.frozen {
		s.cond.Wait()
	}
}

type netmemService struct {
	s    *netmemServer
	gone chan struct{} // closed when the connection breaks
}

// watchedConn closes gone when a read fails: the connection is broken.
type watchedConn struct {
	net.Conn
	once sync.Once
	gone chan struct{}
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(func() { close(c.gone) })
	}
	return n, err
}

// Block answers when the connection breaks: a client learns so of a restart.
func (n *netmemService) Block(_ NetmemArgs, _ *NetmemReply) error {
	<-n.gone
	return nil
}

func (n *netmemService) Ping(_ NetmemArgs, r *NetmemReply) error {
	n.s.enter()
	defer n.s.mu.Unlock()
	r.RunID = n.s.runID
	return nil
}

func (n *netmemService) live(key string, now time.Time) (netmemEntry, bool) {
	e, ok := n.s.locks[key]
	if ok && !now.Before(e.Expires) && !netmemBroken("immortal") {
		delete(n.s.locks, key)
		return e, false
	}
	return e, ok
}

func (n *netmemService) TryAcquire(a NetmemArgs, r *NetmemReply) error {
	n.s.enter()
	defer n.s.mu.Unlock()
	now := time.Now()
	if e, ok := n.live(a.Key, now); ok && !netmemBroken("no-exclusion") {
		if e.Owner != a.Owner {
			return errors.New("locked")
		}
		r.Token = e.Token
		return nil
	}
	ttl := a.TTL
	if netmemBroken("short-lease") {
		ttl /= 2
	}
	n.s.counters[a.Key]++
	e := netmemEntry{Owner: a.Owner, Token: n.s.counters[a.Key], Expires: now.Add(ttl)}
	n.s.locks[a.Key] = e
	r.Token = e.Token
	return nil
}

func (n *netmemService) Refresh(a NetmemArgs, r *NetmemReply) error {
	n.s.enter()
	defer n.s.mu.Unlock()
	now := time.Now()
	e, ok := n.live(a.Key, now)
	if !ok || e.Owner != a.Owner {
		return errors.New("not held")
	}
	if a.Extend {
		ttl := a.TTL
		if netmemBroken("short-lease") {
			ttl /= 2
		}
		e.Expires = now.Add(ttl)
		n.s.locks[a.Key] = e
	}
	return nil
}

func (n *netmemService) Release(a NetmemArgs, r *NetmemReply) error {
	n.s.enter()
	defer n.s.mu.Unlock()
	e, ok := n.live(a.Key, time.Now())
	if !ok || (e.Owner != a.Owner && !netmemBroken("no-owner-check")) {
		return errors.New("not held")
	}
	delete(n.s.locks, a.Key)
	return nil
}

// netmemDriver is one client.
type netmemDriver struct {
	addr string

	dialMu sync.Mutex // one dial at a time
	mu     sync.Mutex
	client *rpc.Client // nil while disconnected
	runID  int
	held   map[*driver.Request]bool // true: taken after a reconnect to a new server
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

func dialNetmem(ctx context.Context, addr string) (*netmemDriver, error) {
	d := &netmemDriver{addr: addr, held: map[*driver.Request]bool{}, done: make(chan struct{})}
	if _, _, err := d.conn(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// dial connects and asks the server's run id, within ctx.
func (d *netmemDriver) dial(ctx context.Context) (*rpc.Client, int, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", d.addr)
	for netmemBroken("waits-on-refusal") && err != nil && ctx.Err() == nil {
		// Treats a refusal as silence: dials again until ctx ends.
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
		conn, err = dialer.DialContext(ctx, "tcp", d.addr)
	}
	if err != nil {
		if netmemBroken("permanent-errors") {
			return nil, 0, fmt.Errorf("netmem: %s", err.Error()) // loses its class
		}
		return nil, 0, fmt.Errorf("%w: netmem: %w", driver.ErrUnavailable, err)
	}
	c := rpc.NewClient(conn)
	var r NetmemReply
	pctx := ctx
	if netmemBroken("gives-up-on-silence") {
		// Treats silence as a refusal: a server that does not answer at once
		// is given up on.
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
	}
	if err := d.call(pctx, c, "Ping", NetmemArgs{}, &r); err != nil {
		_ = c.Close()
		return nil, 0, err
	}
	return c, r.RunID, nil
}

// call makes one RPC on c within ctx.
func (d *netmemDriver) call(ctx context.Context, c *rpc.Client, method string, a NetmemArgs, r *NetmemReply) error {
	call := c.Go("Netmem."+method, a, r, make(chan *rpc.Call, 1))
	if netmemBroken("ignores-ctx") {
		<-call.Done
	} else {
		select {
		case <-call.Done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var se rpc.ServerError
	switch {
	case call.Error == nil:
		return nil
	case errors.As(call.Error, &se) && se == "locked":
		return driver.ErrLocked
	case errors.As(call.Error, &se) && se == "not held":
		return driver.ErrNotHeld
	case netmemBroken("permanent-errors"):
		return fmt.Errorf("netmem: %s", call.Error.Error()) // loses its class
	default:
		return fmt.Errorf("%w: netmem: %w", driver.ErrUnavailable, call.Error)
	}
}

// conn returns the connection, connecting first (within ctx) if there is none.
// A connection to a new run of the server has the held locks checked, and those
// gone reported lost.
func (d *netmemDriver) conn(ctx context.Context) (*rpc.Client, int, error) {
	d.mu.Lock()
	c, run, closed := d.client, d.runID, d.closed
	d.mu.Unlock()
	switch {
	case closed:
		return nil, 0, driver.ErrClosed
	case c != nil:
		return c, run, nil
	}
	d.dialMu.Lock()
	defer d.dialMu.Unlock()
	d.mu.Lock()
	c, run = d.client, d.runID
	d.mu.Unlock()
	if c != nil {
		return c, run, nil
	}
	c, run, err := d.dial(ctx)
	if err != nil {
		return nil, 0, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = c.Close()
		return nil, 0, driver.ErrClosed
	}
	first := d.runID == 0
	changed := !first && run != d.runID && run != -d.runID
	d.client, d.runID = c, run
	if changed && netmemBroken("spurious-loss-after-restart") {
		d.runID = -run // as a driver that compares a stale server id
	}
	var reqs []*driver.Request
	for r := range d.held {
		reqs = append(reqs, r)
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go d.watch(c)
	if changed && !netmemBroken("never-lost") {
		for _, r := range reqs {
			err := d.call(ctx, c, "Refresh", NetmemArgs{Key: r.Key, Owner: r.Owner}, &NetmemReply{})
			if errors.Is(err, driver.ErrNotHeld) {
				d.forget(r)
				r.Lost.Lost(fmt.Errorf("%w: netmem: the server restarted without the lock", driver.ErrNotHeld))
			}
		}
	}
	return c, d.runIDNow(), nil
}

func (d *netmemDriver) runIDNow() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runID
}

// watch waits for c to break (the server closed it) and connects again at once,
// so that a restart is noticed without waiting for a call.
func (d *netmemDriver) watch(c *rpc.Client) {
	defer d.wg.Done()
	// A call the server never answers: it ends when the connection does.
	done := c.Go("Netmem.Block", NetmemArgs{}, &NetmemReply{}, make(chan *rpc.Call, 1)).Done
	select {
	case <-d.done:
		return
	case <-done:
	}
	d.mu.Lock()
	if d.client == c {
		d.client = nil
	}
	d.mu.Unlock()
	_ = c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _, err := d.conn(ctx)
		cancel()
		if err == nil || errors.Is(err, driver.ErrClosed) {
			return
		}
		select {
		case <-d.done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d *netmemDriver) forget(r *driver.Request) {
	d.mu.Lock()
	delete(d.held, r)
	d.mu.Unlock()
}

func (d *netmemDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: true, Expiring: true, MinTTL: driver.FloorTTL, MaxTTL: driver.DefaultMaxTTL}
}

// netmemAttemptBound bounds one TryAcquire, whatever its context allows.
const netmemAttemptBound = 500 * time.Millisecond

func (d *netmemDriver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	parent := ctx
	if !netmemBroken("unbounded-attempt") {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, netmemAttemptBound)
		defer cancel()
	}
	c, run, err := d.conn(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	start := time.Now()
	var r NetmemReply
	if err := d.call(ctx, c, "TryAcquire", NetmemArgs{Key: req.Key, Owner: req.Owner, TTL: req.TTL}, &r); err != nil {
		if ctx.Err() != nil && parent.Err() == nil {
			return driver.Grant{}, fmt.Errorf("%w: netmem: no answer within %v: %w", driver.ErrUnavailable, netmemAttemptBound, err)
		}
		return driver.Grant{}, err
	}
	d.mu.Lock()
	d.held[req] = run < 0
	d.mu.Unlock()
	if netmemBroken("early-loss") {
		time.AfterFunc(10*time.Millisecond, func() { req.Lost.Lost(fmt.Errorf("%w: netmem: broken early loss", driver.ErrNotHeld)) })
	}
	return driver.Grant{Token: r.Token, Start: start}, nil
}

func (d *netmemDriver) Refresh(ctx context.Context, req *driver.Request) error {
	c, run, err := d.conn(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	spurious := run < 0 && d.held[req]
	d.mu.Unlock()
	if spurious {
		d.forget(req)
		return fmt.Errorf("%w: netmem: server changed", driver.ErrNotHeld)
	}
	if netmemBroken("never-lost") {
		return nil
	}
	if netmemBroken("wrong-silence-cause") {
		// A server that does not answer within a quarter of the TTL is taken
		// to have given the lock to someone else: a wrong cause, told before
		// the validity deadline could tell the right one.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.TTL/4)
		defer cancel()
	}
	err = d.call(ctx, c, "Refresh", NetmemArgs{Key: req.Key, Owner: req.Owner, TTL: req.TTL, Extend: true}, &NetmemReply{})
	if err != nil && !errors.Is(err, driver.ErrNotHeld) && netmemBroken("wrong-silence-cause") {
		err = fmt.Errorf("%w: %w: netmem: broken: silence blamed on another owner", driver.ErrNotHeld, driver.ErrTakenOver)
	}
	if errors.Is(err, driver.ErrNotHeld) {
		d.forget(req)
	}
	return err
}

func (d *netmemDriver) Release(ctx context.Context, req *driver.Request) error {
	c, _, err := d.conn(ctx)
	if err != nil {
		return err
	}
	err = d.call(ctx, c, "Release", NetmemArgs{Key: req.Key, Owner: req.Owner}, &NetmemReply{})
	if err == nil || errors.Is(err, driver.ErrNotHeld) {
		d.forget(req)
	}
	return err
}

func (d *netmemDriver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	c := d.client
	d.mu.Unlock()
	var err error
	if c != nil {
		err = c.Close()
	}
	d.wg.Wait()
	if errors.Is(err, rpc.ErrShutdown) {
		err = nil
	}
	return err
}
