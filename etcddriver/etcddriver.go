// Package etcddriver is the distlock driver for etcd v3.
//
// (Package documentation is completed below.)
package etcddriver

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
)

// DefaultPrefix is the key prefix when none is given: locks live under
// /distlock/.
const DefaultPrefix = "/distlock"

// Option configures a Driver made with New.
type Option func(*config)

type config struct {
	prefix string
	minTTL time.Duration
}

// WithPrefix sets the etcd key prefix every lock lives under (trailing slashes are
// dropped; empty means DefaultPrefix). Two drivers exclude each other only if
// they use the same prefix, and one prefix must not lie inside another's locks:
// with prefixes /a and /a/b, the lock "b" of the first would contain the locks of
// the second.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithMinTTL declares the server's minimum lease TTL instead of measuring it.
// New normally asks etcd for a one-second lease and reads the TTL it grants
// (etcd raises short TTLs to a minimum derived from its election timeout: 2s with
// the defaults). A wrong value does no harm beyond an error: if etcd later grants
// a longer lease than asked, the acquisition fails with ErrUnsupported.
func WithMinTTL(d time.Duration) Option { return func(c *config) { c.minTTL = d } }

// Driver takes locks in etcd. Use it through lock.New or lock.Open; its methods
// implement driver.Driver, driver.Acquirer and driver.BatchRefresher.
type Driver struct {
	c      *clientv3.Client
	owned  bool // Close closes c
	prefix string
	minTTL time.Duration

	ctx    context.Context // cancelled by Close: ends keepalives and background deletes
	cancel context.CancelFunc
	done   chan struct{} // closed by Close: ends waiting Acquire calls
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	leases  map[int64]*session // the live session per lease TTL in seconds
	entries map[ownerKey]*entry
	slots   map[slotKey]*slot
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
)

// probeTimeout bounds New's measurement of the server's minimum lease TTL.
const probeTimeout = 10 * time.Second

// New returns a Driver that locks with the client c, which stays the caller's:
// Close does not close it. Unless WithMinTTL is given, New asks etcd once for the
// minimum lease TTL it grants, so it needs the server to answer.
func New(c *clientv3.Client, opts ...Option) (*Driver, error) {
	ctx, cancel := context.WithTimeout(c.Ctx(), probeTimeout)
	defer cancel()
	return newDriver(ctx, c, false, opts)
}

func newDriver(ctx context.Context, c *clientv3.Client, owned bool, opts []Option) (*Driver, error) {
	if c == nil {
		return nil, fmt.Errorf("etcddriver: nil client")
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.minTTL < 0 {
		return nil, fmt.Errorf("etcddriver: negative minimum TTL %v", cfg.minTTL)
	}
	if cfg.minTTL == 0 {
		m, err := measureMinTTL(ctx, c)
		if err != nil {
			return nil, err
		}
		cfg.minTTL = m
	}
	d := &Driver{
		c:       c,
		owned:   owned,
		prefix:  normalizePrefix(cfg.prefix),
		minTTL:  cfg.minTTL,
		done:    make(chan struct{}),
		leases:  map[int64]*session{},
		entries: map[ownerKey]*entry{},
		slots:   map[slotKey]*slot{},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d, nil
}

// measureMinTTL asks for a one-second lease and reads back what etcd granted:
// etcd raises a TTL below its minimum (1.5 election timeouts, rounded up to whole
// seconds) without saying so, and a lock that lives longer than its holder thinks
// delays everyone else after a crash.
func measureMinTTL(ctx context.Context, c *clientv3.Client) (time.Duration, error) {
	g, err := c.Grant(ctx, 1)
	if err != nil {
		return 0, fmt.Errorf("etcddriver: measuring the server's minimum lease TTL: %w", err)
	}
	granted := g.TTL
	ttl, err := c.TimeToLive(ctx, g.ID)
	if err == nil && ttl.GrantedTTL > granted {
		granted = ttl.GrantedTTL
	}
	_, rerr := c.Revoke(ctx, g.ID)
	if err != nil {
		return 0, fmt.Errorf("etcddriver: measuring the server's minimum lease TTL: %w", err)
	}
	if rerr != nil {
		return 0, fmt.Errorf("etcddriver: revoking the probe lease: %w", rerr)
	}
	if granted < 1 {
		granted = 1
	}
	return time.Duration(granted) * time.Second, nil
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fencing:  true,
		Expiring: true,
		Notify:   true,
		MinTTL:   d.minTTL,
	}
}

// Prefix returns the etcd key prefix the driver's locks live under.
func (d *Driver) Prefix() string { return d.prefix }

// LockPrefix returns the name that etcd's own tools take for the lock on key:
// `etcdctl lock <name>` and concurrency.NewMutex(session, name) contend for the
// same lock as this driver does.
func (d *Driver) LockPrefix(key string) string { return lockPrefix(d.prefix, key) }

// Leases returns the leases the driver keeps alive now, one per distinct lease TTL
// in use. Revoking one (etcdctl lease revoke) ends every lock on it: the driver
// notices at its next keepalive and closes their Lost channels.
func (d *Driver) Leases() []clientv3.LeaseID {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []clientv3.LeaseID
	for _, s := range d.leases {
		select {
		case <-s.ready:
			if s.grantErr == nil {
				ids = append(ids, s.id)
			}
		default:
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// String names the driver by its prefix; it never prints credentials.
func (d *Driver) String() string { return "etcddriver(" + d.prefix + ")" }

// Close revokes the driver's leases, which releases every lock it holds at once
// (their Lost channels close), ends waiting Acquire calls with ErrClosed, stops
// the background keepalives, and closes the client if the driver opened it. Calls
// after Close return ErrClosed; calling Close again returns nil.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	var live []*session
	var lost []lostSet
	for _, s := range d.leases {
		select {
		case <-s.ready:
		default:
			continue // its grant sees closed and revokes
		}
		if s.grantErr != nil {
			continue
		}
		live = append(live, s)
		lost = append(lost, s.endLocked(driver.ErrClosed))
	}
	d.mu.Unlock()
	d.cancel()
	for _, l := range lost {
		l.run()
	}
	var wg sync.WaitGroup
	for _, s := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.revoke(s.id)
		}()
	}
	wg.Wait()
	d.wg.Wait()
	if d.owned {
		return d.c.Close()
	}
	return nil
}
