// Package memdriver is an in-process lock backend for unit tests of code that uses
// package lock. It keeps the semantics of a real expiring backend (TTL leases,
// owner-checked refresh and release, fencing tokens, waiters woken on release) so
// code tested against it behaves the same against Redis or etcd, but it
// coordinates goroutines of one process only: it is not a distributed lock.
//
// # URL format
//
//	mem://name
//
// Lockers opened with the same name in one process share one store, as separate
// clients of one server would; different names are independent. The name may be
// empty (mem://). The portable parameters (ttl, auto_refresh, prefix) apply; the
// driver has no parameters of its own.
//
// # Capabilities
//
//   - Fencing: yes; a counter per key lives in the store for the life of the
//     process, so tokens keep increasing across expiry and across Lockers.
//   - Expiring: yes; a lock lives for its TTL unless refreshed, like a lease.
//   - Notify: yes; a release wakes waiters at once, and a waiter sleeps until the
//     holder's expiry at most.
//   - FIFO: no; woken waiters race, as they do on most backends.
//   - Shared: no.
package memdriver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// Scheme is the URL scheme this package registers.
const Scheme = "mem"

func init() { driver.Register(Scheme, open) }

// open is the driver.Opener of mem URLs.
func open(_ context.Context, cfg driver.Config) (driver.Driver, error) {
	u := cfg.URL
	p := driver.NewParams("memdriver", u.Query())
	p.Portable = "ttl, auto_refresh, prefix" // the driver has none of its own
	if err := p.Check(); err != nil {
		return nil, err
	}
	if u.User != nil || u.Port() != "" {
		return nil, fmt.Errorf("%w: memdriver: want mem://name, got a user or port", driver.ErrInvalidURL)
	}
	return New(u.Host+u.Path, WithPrefix(cfg.Prefix)), nil
}

// store is the shared state of all clients of one name, playing the server.
type store struct {
	mu       sync.Mutex
	locks    map[string]*entry
	counters map[string]uint64
	released map[string]chan struct{} // closed when the key's lock is released
}

type entry struct {
	owner   string
	token   uint64
	expires time.Time
	client  *Driver
}

var (
	storesMu sync.Mutex
	stores   = map[string]*store{}
)

func storeNamed(name string) *store {
	storesMu.Lock()
	defer storesMu.Unlock()
	s, ok := stores[name]
	if !ok {
		s = &store{locks: map[string]*entry{}, counters: map[string]uint64{}, released: map[string]chan struct{}{}}
		stores[name] = s
	}
	return s
}

// Driver is one client of an in-process store.
type Driver struct {
	s      *store
	prefix string

	mu     sync.Mutex
	closed bool
}

// Option configures a Driver made by New.
type Option func(*options)

type options struct {
	prefix string
}

// WithPrefix sets the namespace of the driver's locks: clients of one store
// with different prefixes never share a lock. Empty is a namespace of its own
// (the default).
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// New returns a new client of the store called name. Clients of one name exclude
// each other as clients of one server would. Unlike the other drivers' New it
// returns no error: nothing here can fail.
func New(name string, opts ...Option) *Driver {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return &Driver{s: storeNamed(name), prefix: o.prefix}
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: true, Expiring: true, Notify: true}
}

func (d *Driver) key(k string) string { return d.prefix + "\x00" + k }

func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// live returns the unexpired entry for key, dropping an expired one.
func (s *store) live(key string, now time.Time) *entry {
	e := s.locks[key]
	if e != nil && !now.Before(e.expires) {
		delete(s.locks, key)
		s.wake(key)
		return nil
	}
	return e
}

func (s *store) wake(key string) {
	if ch, ok := s.released[key]; ok {
		close(ch)
		delete(s.released, key)
	}
}

func (s *store) releasedCh(key string) chan struct{} {
	ch, ok := s.released[key]
	if !ok {
		ch = make(chan struct{})
		s.released[key] = ch
	}
	return ch
}

// tryLocked makes one attempt with s.mu held. On ErrLocked it also returns when
// the holder's lease ends.
func (d *Driver) tryLocked(req *driver.Request, now time.Time) (driver.Grant, time.Time, error) {
	k := d.key(req.Key)
	if e := d.s.live(k, now); e != nil {
		if e.owner == req.Owner {
			return driver.Grant{Token: e.token, Start: e.expires.Add(-req.TTL)}, time.Time{}, nil
		}
		return driver.Grant{}, e.expires, driver.ErrLocked
	}
	d.s.counters[k]++
	e := &entry{owner: req.Owner, token: d.s.counters[k], expires: now.Add(req.TTL), client: d}
	d.s.locks[k] = e
	return driver.Grant{Token: e.token, Start: now}, time.Time{}, nil
}

// TryAcquire implements driver.Driver.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if d.isClosed() {
		return driver.Grant{}, driver.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	g, _, err := d.tryLocked(req, time.Now())
	return g, err
}

// Acquire implements driver.Acquirer: it waits for a release or for the holder's
// lease to end, whichever comes first.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	for {
		if d.isClosed() {
			return driver.Grant{}, driver.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, err
		}
		d.s.mu.Lock()
		g, expires, err := d.tryLocked(req, time.Now())
		if err == nil {
			d.s.mu.Unlock()
			return g, nil
		}
		released := d.s.releasedCh(d.key(req.Key))
		d.s.mu.Unlock()

		t := time.NewTimer(time.Until(expires))
		select {
		case <-ctx.Done():
		case <-released:
		case <-t.C:
		}
		t.Stop()
	}
}

// Refresh implements driver.Driver.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	if d.isClosed() {
		return driver.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	now := time.Now()
	e := d.s.live(d.key(req.Key), now)
	if e == nil || e.owner != req.Owner {
		return driver.ErrNotHeld
	}
	e.expires = now.Add(req.TTL)
	return nil
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	if d.isClosed() {
		return driver.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	k := d.key(req.Key)
	e := d.s.live(k, time.Now())
	if e == nil || e.owner != req.Owner {
		return driver.ErrNotHeld
	}
	delete(d.s.locks, k)
	d.s.wake(k)
	return nil
}

// Sever makes the store forget every lock this client holds, as a server does
// when a client's session ends. The client is not told; like a real client it
// learns at its next refresh, and its Lost channels close.
func (d *Driver) Sever() {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	for k, e := range d.s.locks {
		if e.client == d {
			delete(d.s.locks, k)
			d.s.wake(k)
		}
	}
}

// Delete removes the lock on key whoever holds it, as an operator deleting a key
// on a server would. The holder learns at its next refresh.
func (d *Driver) Delete(key string) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	k := d.key(key)
	if _, ok := d.s.locks[k]; ok {
		delete(d.s.locks, k)
		d.s.wake(k)
	}
}

// Close implements driver.Driver. Locks the client still holds stay until their
// TTL passes, as they would on a server after the client went away.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

var _ driver.Acquirer = (*Driver)(nil)
