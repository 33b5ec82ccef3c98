package pgadvisory

import (
	"context"
	"fmt"
	"sync"

	"github.com/distlock/lock/driver"
)

// Release gives the lock back with pg_advisory_unlock on the session that holds
// it. It returns driver.ErrNotHeld if req.Owner holds no lock on req.Key here, if
// the session ended (the server released the lock with it), or if the server says
// the session did not hold it (the unlock's false result). It never touches
// another owner's lock.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	k := ownerKey{req.Key, req.Owner}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errClosed
	}
	h := d.byOwner[k]
	if h == nil {
		d.mu.Unlock()
		return driver.ErrNotHeld
	}
	c := h.c
	c.users++
	d.mu.Unlock()
	defer d.letGo(c)

	c.mu.Lock()
	defer c.unlock()
	if !d.holds(h) {
		return fmt.Errorf("%w: its session was lost", driver.ErrNotHeld)
	}
	ok, err := c.exec(ctx, unlockFor(h.shared), h.id)
	switch {
	case c.broken(err):
		cause := errSessionLost(err)
		d.kill(c, cause)
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, cause)
	case err != nil:
		return classify(ctx, fmt.Errorf("pgadvisory: unlock: %w", err)) // the lock stays held
	case ok.null:
		cause := d.pooled(c, 0)
		d.kill(c, cause)
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, cause)
	}
	d.mu.Lock()
	d.forgetLocked(h)
	d.broadcastLocked()
	d.mu.Unlock()
	if ok.v == 0 {
		return fmt.Errorf("%w: pg_advisory_unlock returned false: the session did not hold the lock", driver.ErrNotHeld)
	}
	return nil
}

// holds reports whether h is still a held lock.
func (d *Driver) holds(h *holding) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.closed && d.byOwner[h.k] == h
}

// Refresh confirms that req.Owner still holds req.Key: the session holding it
// answers a ping, from the same backend. A session that is gone or changed is
// given up (every lock on it is reported lost) and Refresh returns
// driver.ErrNotHeld. Refreshes of locks on one connection that are due together
// share one round trip.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	h, err := d.lookup(req)
	if err != nil {
		return err
	}
	return classify(ctx, d.confirm(h, h.c.ping(ctx)))
}

func (d *Driver) lookup(req *driver.Request) (*holding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errClosed
	}
	h := d.byOwner[ownerKey{req.Key, req.Owner}]
	if h == nil {
		return nil, driver.ErrNotHeld
	}
	return h, nil
}

// confirm turns the outcome of a ping of h's session into h's refresh result.
func (d *Driver) confirm(h *holding, pingErr error) error {
	if d.holds(h) {
		return pingErr // nil, or a failure that left the session in place
	}
	if pingErr == nil {
		pingErr = errSessionLost(fmt.Errorf("released or lost while refreshing"))
	}
	return fmt.Errorf("%w: %w", driver.ErrNotHeld, pingErr)
}

// RefreshBatch refreshes many locks with one ping per connection that holds any
// of them, the connections pinged concurrently.
func (d *Driver) RefreshBatch(ctx context.Context, reqs []*driver.Request) []error {
	errs := make([]error, len(reqs))
	hs := make([]*holding, len(reqs))
	var conns []*lockConn
	seen := map[*lockConn]int{}
	for i, req := range reqs {
		h, err := d.lookup(req)
		if err != nil {
			errs[i] = err
			continue
		}
		hs[i] = h
		if _, ok := seen[h.c]; !ok {
			seen[h.c] = len(conns)
			conns = append(conns, h.c)
		}
	}
	pings := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pings[i] = c.ping(ctx)
		}()
	}
	wg.Wait()
	for i, h := range hs {
		if h != nil {
			errs[i] = classify(ctx, d.confirm(h, pings[seen[h.c]]))
		}
	}
	return errs
}
