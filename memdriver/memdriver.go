// Package memdriver is an in-process lock backend for unit tests of code that uses
// package lock. It keeps the semantics of a real expiring backend (TTL leases,
// owner-checked refresh and release, fencing tokens, waiters woken on release) so
// code tested against it behaves the same against Redis or etcd, but it
// coordinates goroutines of one process only: it is not a distributed lock. The
// store, its rules and why they hold are in
// https://github.com/distlock/lock/blob/main/docs/backends/mem.md.
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
//     process, so tokens keep increasing across expiry and across Lockers, and
//     every grant (exclusive, shared or permit) takes the next one.
//   - Expiring: yes; a hold lives for its TTL unless refreshed, like a lease.
//   - Notify: yes; a waiting Acquire sleeps until the key changes (a release,
//     a grant, a waiter leaving) or the first holder's lease ends, never polls.
//   - FIFO: yes; waiting Acquire calls queue per key in arrival order under
//     the rule below, so exclusive requests and permits are granted in that
//     order. TryAcquire never queues and takes its turn as a newcomer.
//   - Shared: yes, with writer preference (WriterPreference).
//   - Permits: yes; a mismatched number of permits is ErrInvalidArgument.
//   - MinTTL and MaxTTL: 10ms and 366 days (driver.FloorTTL and
//     driver.DefaultMaxTTL), package lock's range: the store keeps any TTL.
//
// # Lost locks
//
// A holder learns of a loss at its next Refresh, which returns
// driver.ErrNotHeld wrapping the cause (lock.Err matches it):
//
//   - lock.ErrSessionExpired: Sever dropped the client's holds;
//   - lock.ErrForceReleased: ForceRelease evicted it (told at once, through Lost);
//   - lock.ErrExpired: the hold is gone otherwise (its TTL passed, or Delete).
//
// # Queueing rule
//
// Each key has holders and a queue of waiting Acquire calls in arrival order.
// A request, waiting at its place in the queue or newly arrived (behind the
// whole queue), takes the key when:
//
//   - exclusive: nobody holds the key and nobody waits ahead of it;
//   - shared: no exclusive holder, and no exclusive request waits ahead of it;
//   - a permit of a semaphore of n: fewer than n hold a permit and nobody waits
//     ahead of it.
//
// So once an exclusive request is waiting, shared requests that arrive after
// it wait behind it, while shared requests that arrived before it keep their
// turn (they run together with the current readers as soon as no writer holds
// the key): a stream of overlapping readers delays a writer by the readers
// ahead of it only. A key is either a read-write lock or a semaphore of one
// number of permits while anyone holds or waits on it; a request of another
// shape is ErrInvalidArgument.
//
// # Limits
//
// One process only: Lockers of different processes never see each other's
// locks. The store lives as long as the process, so tokens start again at 1
// in a new one.
package memdriver

import (
	"context"
	"fmt"
	"sync"

	"github.com/distlock/lock/driver"
)

// Scheme is the URL scheme this package registers.
const Scheme = "mem"

func init() { driver.Register(Scheme, open) }

// open is the driver.Opener of mem URLs.
func open(_ context.Context, cfg driver.Config) (driver.Driver, error) {
	u := cfg.URL
	p := driver.NewParams("memdriver", u.Query())
	if err := p.Check(); err != nil {
		return nil, err
	}
	if u.User != nil || u.Port() != "" {
		return nil, fmt.Errorf("%w: memdriver: want mem://name, got a user or port", driver.ErrInvalidURL)
	}
	return New(u.Host+u.Path, WithPrefix(cfg.Prefix)), nil
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
		s = newStore()
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
	done   chan struct{} // closed by Close, ending waits

	// severed (under the store's lock) names the holds Sever dropped, by
	// key and owner, until their Refresh reports driver.ErrSessionExpired.
	severed map[severedHold]struct{}
}

type severedHold struct{ key, owner string }

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
	return &Driver{s: storeNamed(name), prefix: o.prefix, done: make(chan struct{})}
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: true, Expiring: true, Notify: true, FIFO: true, Shared: true, WriterPreference: true, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: driver.DefaultMaxTTL}
}

// Sever makes the store forget every lock this client holds, as a server does
// when a client's session ends. The client is not told; like a real client it
// learns at its next refresh (driver.ErrNotHeld wrapping
// driver.ErrSessionExpired), and its Lost channels close.
func (d *Driver) Sever() {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	for k, ks := range d.s.keys {
		ks.holders.deleteFunc(func(owner string, h *holder) bool {
			if h.client != d {
				return false
			}
			if d.severed == nil {
				d.severed = make(map[severedHold]struct{})
			}
			d.severed[severedHold{k, owner}] = struct{}{}
			return true
		})
		d.s.changed(k, ks)
	}
}

// Delete removes every hold on key whoever holds it, as an operator deleting a
// key on a server would. The holders learn at their next refresh.
func (d *Driver) Delete(key string) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	k := d.key(key)
	if ks := d.s.keys[k]; ks != nil {
		ks.holders.clear()
		d.s.changed(k, ks)
	}
}

// Close implements driver.Driver. Locks the client still holds stay until their
// TTL passes, as they would on a server after the client went away.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.done)
	}
	return nil
}

var _ driver.Acquirer = (*Driver)(nil)
