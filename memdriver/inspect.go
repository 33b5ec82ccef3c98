package memdriver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/distlock/lock/driver"
)

// Inspect implements driver.Inspector.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := d.check(ctx); err != nil {
		return driver.Info{}, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	k := d.key(key)
	in := driver.Info{Token: d.s.counters[k]}
	ks := d.s.keys[k]
	if ks == nil {
		return in, nil
	}
	d.s.expire(k, ks, time.Now())
	in.Waiters, in.Permits = len(ks.queue), ks.permits
	ks.holders.each(func(owner string, h *holder) {
		in.Holders = append(in.Holders, driver.Holder{Owner: owner, Label: h.label, Shared: h.shared, Token: h.token, Since: h.since.time(), Expires: h.expires.time()})
	})
	slices.SortFunc(in.Holders, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return in, nil
}

// List implements driver.Lister.
func (d *Driver) List(ctx context.Context, prefix string) ([]string, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	var keys []string
	now, ns := time.Now(), d.key("")
	for k, ks := range d.s.keys {
		user, ok := strings.CutPrefix(k, ns)
		if !ok || !strings.HasPrefix(user, prefix) {
			continue
		}
		d.s.expire(k, ks, now)
		if ks.holders.len() > 0 {
			keys = append(keys, user)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// ForceRelease implements driver.Evictor. The evicted holders are told at
// once, through their requests' Lost, with driver.ErrForceReleased.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.check(ctx); err != nil {
		return 0, err
	}
	d.s.mu.Lock()
	k := d.key(key)
	ks := d.s.keys[k]
	if ks != nil {
		d.s.expire(k, ks, time.Now())
	}
	if ks == nil || ks.holders.len() == 0 {
		d.s.mu.Unlock()
		return 0, driver.ErrNotHeld
	}
	var lost []driver.LossReporter
	ks.holders.each(func(_ string, h *holder) {
		if h.lost != nil {
			lost = append(lost, h.lost)
		}
	})
	n := ks.holders.len()
	ks.holders.clear()
	d.s.changed(k, ks)
	d.s.mu.Unlock()
	// Outside the store's lock, as driver.Request.Lost asks.
	for _, f := range lost {
		f.Lost(fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrForceReleased))
	}
	return n, nil
}

// Relabel implements driver.Labeler.
func (d *Driver) Relabel(ctx context.Context, req *driver.Request, label string) error {
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
	h := ks.holders.get(req.Owner)
	if h == nil {
		return driver.ErrNotHeld
	}
	h.label = label
	d.s.notify(k)
	return nil
}

// Watch implements driver.Watcher: a signal for every grant, release,
// eviction, relabelling, expiry found and waiter leaving on key.
func (d *Driver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	k := d.key(key)
	c := make(chan struct{}, 1)
	d.s.mu.Lock()
	if d.s.watchers[k] == nil {
		d.s.watchers[k] = map[chan struct{}]struct{}{}
	}
	d.s.watchers[k][c] = struct{}{}
	d.s.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-d.done:
		}
		d.s.mu.Lock()
		delete(d.s.watchers[k], c)
		if len(d.s.watchers[k]) == 0 {
			delete(d.s.watchers, k)
		}
		d.s.mu.Unlock()
		close(c)
	}()
	return c, nil
}

var (
	_ driver.Inspector = (*Driver)(nil)
	_ driver.Lister    = (*Driver)(nil)
	_ driver.Evictor   = (*Driver)(nil)
	_ driver.Labeler   = (*Driver)(nil)
	_ driver.Watcher   = (*Driver)(nil)
)
