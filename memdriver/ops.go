package memdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
)

func (d *Driver) key(k string) string { return d.prefix + "\x00" + k }

func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// check is what every call checks first.
func (d *Driver) check(ctx context.Context) error {
	if d.isClosed() {
		return driver.ErrClosed
	}
	return ctx.Err()
}

// held returns the grant req already holds (a retry after a lost reply).
func held(ks *keyState, req *driver.Request) (driver.Grant, bool) {
	h := ks.holders.get(req.Owner)
	if h == nil {
		return driver.Grant{}, false
	}
	return driver.Grant{Token: h.token, Start: h.expires.time().Add(-req.TTL)}, true
}

// TryAcquire implements driver.Driver. It never queues, and it takes its turn
// as a newcomer: behind every waiter that the queueing rule puts first.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := d.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	k, now := d.key(req.Key), time.Now()
	ks, err := d.s.state(k, req, now)
	if err != nil {
		return driver.Grant{}, err
	}
	if g, ok := held(ks, req); ok {
		return g, nil
	}
	if ks.mayTake(req.Shared, len(ks.queue)) {
		return d.s.grant(k, ks, req, d, now), nil
	}
	return driver.Grant{}, driver.ErrLocked // someone holds or waits: ks stays
}

// TryAcquireSet implements driver.SetAcquirer: under the store's one mutex
// every key is checked by TryAcquire's rule, and all are granted or none.
func (d *Driver) TryAcquireSet(ctx context.Context, reqs []*driver.Request) ([]driver.Grant, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	if err := driver.CheckSet("memdriver", reqs); err != nil {
		return nil, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	now := time.Now()
	keys := make([]string, len(reqs))
	states := make([]*keyState, 0, len(reqs))
	var err error
	for i, req := range reqs {
		keys[i] = d.key(req.Key)
		var ks *keyState
		if ks, err = d.s.state(keys[i], req, now); err != nil {
			break
		}
		states = append(states, ks)
		if _, ok := held(ks, req); !ok && !ks.mayTake(req.Shared, len(ks.queue)) {
			err = driver.ErrLocked
			break
		}
	}
	if err != nil {
		for i, ks := range states {
			if ks.holders.len() == 0 && len(ks.queue) == 0 {
				d.s.changed(keys[i], ks) // made for this attempt: forgotten again
			}
		}
		return nil, err
	}
	grants := make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		if g, ok := held(states[i], req); ok {
			grants[i] = g
			continue
		}
		grants[i] = d.s.grant(keys[i], states[i], req, d, now)
	}
	return grants, nil
}

// Acquire implements driver.Acquirer: the request joins the key's queue and
// waits, without polling, until the queueing rule gives it the key. It is woken
// by every release, cancelled waiter and grant on the key, and by the end of
// the first holder's lease.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := d.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	k := d.key(req.Key)
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	now := time.Now()
	ks, err := d.s.state(k, req, now)
	if err != nil {
		return driver.Grant{}, err
	}
	if g, ok := held(ks, req); ok {
		return g, nil
	}
	if ks.mayTake(req.Shared, len(ks.queue)) {
		return d.s.grant(k, ks, req, d, now), nil
	}
	ks.queue = append(ks.queue, &waiter{owner: req.Owner, shared: req.Shared})
	for {
		if ks.wake == nil {
			ks.wake = make(chan struct{})
		}
		wake, next := ks.wake, ks.nextExpiry()
		d.s.mu.Unlock()
		src, err := d.wait(ctx, wake, next)
		if err == nil {
			driver.Woke(ctx, src)
		}
		d.s.mu.Lock()
		// The waiter keeps the key's state alive: it is the same ks.
		now = time.Now()
		d.s.expire(k, ks, now)
		i := ks.place(req.Owner)
		if err != nil {
			d.s.leave(k, ks, i)
			return driver.Grant{}, err
		}
		if ks.mayTake(req.Shared, i) {
			g := d.s.grant(k, ks, req, d, now)
			d.s.leave(k, ks, i) // may let the waiters behind it go too
			return g, nil
		}
	}
}

// wait returns what woke it, a change on the key (wake closed: a notification)
// or the end of the lease ending at next (if any: a timer), and an error when
// ctx ends or the client is closed.
func (d *Driver) wait(ctx context.Context, wake <-chan struct{}, next time.Time) (driver.WakeSource, error) {
	var expiry <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		expiry = t.C
	}
	select {
	case <-wake:
		return driver.WakeNotified, nil
	case <-expiry:
		return driver.WakeTimer, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-d.done:
		return 0, driver.ErrClosed
	}
}

// Refresh implements driver.Driver.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	k, now := d.key(req.Key), time.Now()
	ks := d.s.keys[k]
	var h *holder
	if ks != nil {
		d.s.expire(k, ks, now)
		h = ks.holders.get(req.Owner)
	}
	if h == nil {
		return d.lostCause(k, req.Owner)
	}
	h.expires = at(now).after(req.TTL)
	return nil
}

// Release implements driver.Driver. A waiting Acquire leaves the queue itself
// before it returns, so Release has only holders to look at.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	k := d.key(req.Key)
	ks := d.s.keys[k]
	if ks == nil {
		return driver.ErrNotHeld
	}
	d.s.expire(k, ks, time.Now())
	if ks.holders.get(req.Owner) == nil {
		return driver.ErrNotHeld
	}
	ks.holders.delete(req.Owner)
	d.s.changed(k, ks)
	return nil
}

// lostCause is Refresh's error for a hold that is gone, with its cause; the
// store's lock is held.
func (d *Driver) lostCause(k, owner string) error {
	sh := severedHold{k, owner}
	if _, ok := d.severed[sh]; ok {
		delete(d.severed, sh)
		return fmt.Errorf("%w: %w: the client's session was severed", driver.ErrNotHeld, driver.ErrSessionExpired)
	}
	return fmt.Errorf("%w: %w: the hold's TTL passed or it was deleted", driver.ErrNotHeld, driver.ErrExpired)
}
