package etcddriver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
)

// A session is one lease of a Driver and the keys written with it. There is one
// live session per distinct lease TTL (in whole seconds); with the Locker's
// default TTL that is one lease for the whole Driver, however many locks it
// holds. One goroutine per session keeps the lease alive and watches the time:
//
//   - it sends a keepalive every third of the lease TTL and records when the last
//     confirmed one was sent: the server cannot expire the lease before that
//     moment plus the TTL, so the lease is trusted until then, less a drift
//     allowance;
//   - when that deadline passes without a confirmed keepalive (etcd unreachable,
//     keepalives failing), or etcd says the lease is gone (expired, or revoked by
//     an operator), every lock on the lease is lost: their Lost callbacks run,
//     waiters are woken with an error, and new acquisitions get a new lease;
//   - it deletes held keys whose TTL passed without a Refresh (a lock on this
//     driver expires like a lease even though its lease lives on for others), and
//     retries deletes that failed, so no key of ours is left to block others;
//   - it revokes the lease after it served no key for a whole TTL;
//   - it sends a keepalive at once when the client's connection comes back
//     (watchConnection): a server that restarted without its data answers that
//     the lease is gone, and the locks are lost then rather than at the next
//     scheduled keepalive or refresh.
type session struct {
	d     *Driver
	slot  leaseSlot     // its requested TTL and place, the key in Driver.leases
	ready chan struct{} // closed once the grant finished, well or not
	lost  chan struct{} // closed when the lease is gone or abandoned
	kick  chan struct{} // asks keep for a keepalive now (the connection came back)

	// Set before ready is closed, read-only afterwards.
	grantErr error
	id       clientv3.LeaseID
	hex      string
	ttl      time.Duration // as granted by the server
	ttlSecs  int64         // the same, in etcd's unit
	drift    time.Duration

	// Guarded by d.held.
	dead      error              // why the session ended; nil while live
	confirmed time.Time          // when the last confirmed grant or keepalive was sent
	entries   int                // entries of this session in Driver.entries
	first     *entry             // the first of them, listed through entry.snext
	orphans   []*entry           // keys to delete whose delete failed
	reserved  map[string][]int32 // name indexes, by user key, kept out of use after a release whose outcome is unknown
	idleSince time.Time
	renewing  *renewal // the keepalive refreshes are waiting for, if any (renewFor)
}

var (
	errLeaseGone     = fmt.Errorf("%w: etcddriver: the lease is gone (expired or revoked)", driver.ErrSessionExpired)
	errLeaseDeadline = fmt.Errorf("%w: etcddriver: no keepalive of the lease was confirmed within its TTL", driver.ErrExpired)
	errExpired       = fmt.Errorf("%w: %w: etcddriver: the lock's TTL passed without a refresh", driver.ErrNotHeld, driver.ErrExpired)
)

// maxKeysPerLease is how many requests a Driver puts on one lease before it
// grants another of the same TTL. etcd (3.4, and 3.5 for users other than
// root) applies a put with a lease in time linear in the keys already on the
// lease (etcd issue #15993): with 65,000 locks on one lease, each acquisition
// cost etcd about a millisecond, acquisitions all but stopped, and the lease's
// keepalives and the refreshes starved (issue 23's scale runs). Cilium caps its
// leases at 1,000 keys for the same reason.
const maxKeysPerLease = 1000

// A leaseSlot names a session in Driver.leases: its lease TTL in seconds, and
// its place among the sessions of that TTL (a new one is granted when all
// before it carry maxKeysPerLease requests).
type leaseSlot struct {
	secs int64
	n    int32
}

// session returns a live session for ttl with room for a request: the first
// of its TTL's sessions with fewer than maxKeysPerLease requests, granting a
// lease on first use.
func (d *Driver) session(ctx context.Context, ttl time.Duration) (*session, error) {
	secs, err := d.leaseSeconds(ttl)
	if err != nil {
		return nil, err
	}
	for {
		d.held.Lock()
		if err := d.held.OpenLocked(); err != nil {
			d.held.Unlock()
			return nil, err
		}
		slot := leaseSlot{secs: secs}
		s := d.leases[slot]
		for s != nil && s.full() {
			slot.n++
			s = d.leases[slot]
		}
		if s == nil {
			s = &session{d: d, slot: slot, ready: make(chan struct{}), lost: make(chan struct{}), kick: make(chan struct{}, 1)}
			d.leases[slot] = s
			d.held.Unlock()
			if err := d.grant(ctx, s); err != nil {
				return nil, err
			}
			return s, nil
		}
		d.held.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if s.grantErr != nil {
			if ctx.Err() == nil && isContextErr(s.grantErr) {
				continue // the caller that granted gave up; try ourselves
			}
			return nil, s.grantErr
		}
		d.held.Lock()
		dead := s.dead
		d.held.Unlock()
		if dead == nil {
			return s, nil
		}
		// It ended meanwhile and left the map; the next round grants a new one.
	}
}

// full reports whether s carries maxKeysPerLease requests; d.held is locked. A
// session still being granted is not full: requests wait for it. (Requests
// that pick a session at once may put a few more on it than the cap.)
func (s *session) full() bool { return s.entries >= maxKeysPerLease }

// leaseSeconds is the lease TTL for a lock TTL: the TTL rounded up to whole
// seconds (a lease shorter than the TTL could expire while the holder still
// trusts its lock). A TTL outside [minimum, maximum lease TTL] is refused here,
// before etcd sees it; the portable layer refuses those already, with
// lock.ErrInvalidArgument. The arithmetic cannot overflow for any Duration.
func (d *Driver) leaseSeconds(ttl time.Duration) (int64, error) {
	if ttl < d.minTTL || ttl <= 0 || ttl > maxLeaseTTL {
		return 0, fmt.Errorf("etcddriver: TTL %v is outside the lease TTLs etcd grants: from its minimum lease TTL %v to its maximum lease TTL %v",
			ttl, d.minTTL, maxLeaseTTL)
	}
	secs := int64(ttl / time.Second)
	if ttl%time.Second != 0 {
		secs++
	}
	return secs, nil
}

// grant asks etcd for s's lease and starts its keeper. On failure s leaves the map.
func (d *Driver) grant(ctx context.Context, s *session) (err error) {
	defer func() {
		if err != nil {
			s.grantErr = err
			d.held.Lock()
			if d.leases[s.slot] == s {
				delete(d.leases, s.slot)
			}
			s.dead = err
			d.held.Unlock()
			close(s.lost)
		}
		close(s.ready)
	}()
	sent := time.Now()
	resp, err := d.c.Grant(ctx, s.slot.secs)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseTTLTooLarge):
		return fmt.Errorf("etcddriver: etcd refused a lease of %ds as longer than its maximum lease TTL: %w", s.slot.secs, err)
	case err != nil:
		return fmt.Errorf("etcddriver: grant lease: %w", err)
	case resp.TTL > s.slot.secs:
		d.revokeSoon(resp.ID)
		return fmt.Errorf("%w: etcddriver: etcd raised a lease TTL of %ds to %ds: its minimum lease TTL is above the %v this driver was told (WithMinTTL)",
			driver.ErrUnsupported, s.slot.secs, resp.TTL, d.minTTL)
	case resp.TTL < 1:
		d.revokeSoon(resp.ID)
		return fmt.Errorf("etcddriver: etcd granted a lease of %ds for %ds", resp.TTL, s.slot.secs)
	}
	s.id = resp.ID
	s.hex = leaseHex(resp.ID)
	s.ttlSecs = resp.TTL
	s.ttl = time.Duration(resp.TTL) * time.Second // 1 <= TTL <= s.slot.secs <= maxLeaseSeconds: no overflow
	// The etcd leader measures the lease on its own clock: allow for drift as
	// the portable layer does.
	s.drift = driver.Drift(s.ttl)
	d.held.Lock()
	if d.held.ClosedLocked() {
		d.held.Unlock()
		d.revokeBriefly(resp.ID)
		return driver.ErrClosed
	}
	s.confirmed = sent
	s.idleSince = sent
	d.wg.Add(1)
	d.held.Unlock()
	go s.keep()
	return nil
}

// deadlineLocked is when the lease may have expired unless a keepalive is
// confirmed before: etcd cannot expire it sooner than the TTL after the last
// confirmed keepalive was sent, less the drift allowance.
func (s *session) deadlineLocked() time.Time { return s.confirmed.Add(s.ttl - s.drift) }

// keep is the session's goroutine; see the type's comment.
func (s *session) keep() {
	d := s.d
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	nextKeepalive := time.Now().Add(driver.RefreshInterval(s.ttl))
	for {
		now := time.Now()
		d.held.Lock()
		if s.dead != nil {
			d.held.Unlock()
			return
		}
		if !now.Before(s.deadlineLocked()) {
			lost := s.endLocked(errLeaseDeadline)
			d.held.Unlock()
			lost.run()
			d.revokeSoon(s.id)
			return
		}
		expired, earliest := s.expiredLocked(now)
		s.orphans = append(s.orphans, expired...)
		cleanup := len(s.orphans) > 0
		if s.entries > 0 || cleanup {
			s.idleSince = now
		} else if now.Sub(s.idleSince) >= s.ttl {
			lost := s.endLocked(errIdle)
			d.held.Unlock()
			lost.run()
			d.revokeSoon(s.id)
			return
		}
		d.held.Unlock()
		for _, e := range expired {
			e.req.Lost.Lost(errExpired)
		}
		if cleanup {
			s.deleteOrphans()
		}

		if !now.Before(nextKeepalive) {
			switch err := s.keepalive(); {
			case err == nil:
				nextKeepalive = time.Now().Add(driver.RefreshInterval(s.ttl))
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				d.held.Lock()
				lost := s.endLocked(errLeaseGone)
				d.held.Unlock()
				lost.run()
				return
			default:
				// Try again soon; the deadline above ends the session if no
				// keepalive gets through in time.
				nextKeepalive = time.Now().Add(driver.RetryInterval(s.ttl))
			}
			continue // the keepalive took time: look at the clock again
		}

		wake := nextKeepalive
		if !earliest.IsZero() && earliest.Before(wake) {
			wake = earliest
		}
		if cleanup {
			if t := now.Add(driver.RetryInterval(s.ttl)); t.Before(wake) {
				wake = t
			}
		}
		timer.Reset(time.Until(wake))
		select {
		case <-d.held.Done():
			return
		case <-timer.C:
		case <-s.kick:
			nextKeepalive = time.Time{}
		}
	}
}

var errIdle = errors.New("etcddriver: lease retired after serving no lock for a whole TTL")

// keepalive renews the lease once and moves the confirmed time to the moment
// the request was sent.
func (s *session) keepalive() error { return s.keepaliveCtx(s.d.ctx) }

// keepaliveCtx is keepalive within ctx (and never past the lease's deadline).
func (s *session) keepaliveCtx(parent context.Context) error {
	d := s.d
	d.held.Lock()
	deadline := s.deadlineLocked()
	d.held.Unlock()
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	stop := context.AfterFunc(d.ctx, cancel) // Close ends it too
	defer stop()
	sent := time.Now()
	resp, err := d.c.KeepAliveOnce(ctx, s.id)
	if err != nil {
		return err
	}
	if resp.TTL < s.ttlSecs {
		// The server renews to the full TTL; anything else means it did not.
		// (Compared in seconds: a server's TTL need not fit a Duration.)
		return fmt.Errorf("etcddriver: keepalive returned TTL %ds, want %ds", resp.TTL, s.ttlSecs)
	}
	d.held.Lock()
	if sent.After(s.confirmed) {
		s.confirmed = sent
	}
	d.held.Unlock()
	return nil
}

// expiredLocked removes the held entries whose TTL passed without a refresh and
// returns them, with the earliest expiry among those left.
func (s *session) expiredLocked(now time.Time) (expired []*entry, earliest time.Time) {
	d := s.d
	at := now.Sub(d.epoch)
	first := time.Duration(-1)
	d.eachLocked(s, func(e *entry) {
		if e.state != stateHeld {
			return
		}
		if at >= e.paidUntil {
			d.removeLocked(e)
			expired = append(expired, e)
			return
		}
		if first < 0 || e.paidUntil < first {
			first = e.paidUntil
		}
	})
	if first >= 0 {
		earliest = d.epoch.Add(first)
	}
	return expired, earliest
}

// deleteOrphans deletes the keys whose delete failed before; those that fail
// again stay for the next round.
func (s *session) deleteOrphans() {
	d := s.d
	d.held.Lock()
	todo := s.orphans
	s.orphans = nil
	d.held.Unlock()
	ctx, cancel := context.WithTimeout(d.ctx, opTimeout(s.ttl))
	defer cancel()
	var failed []*entry
	for _, e := range todo {
		if err := d.deleteKey(ctx, e); err != nil {
			failed = append(failed, e)
		}
	}
	if len(failed) > 0 {
		d.held.Lock()
		if s.dead == nil {
			s.orphans = append(s.orphans, failed...)
		}
		d.held.Unlock()
	}
}

// opTimeout bounds a background request on behalf of a session.
func opTimeout(ttl time.Duration) time.Duration { return ttl / 3 }

// lostSet is what ending a session leaves to do once d.held is unlocked.
type lostSet struct {
	held []*entry
	err  error
}

func (l lostSet) run() {
	for _, e := range l.held {
		e.req.Lost.Lost(l.err)
	}
}

// endLocked ends the session: it leaves the map, its waiters are woken, and its
// held locks are returned for their Lost callbacks.
func (s *session) endLocked(cause error) lostSet {
	d := s.d
	if s.dead != nil {
		return lostSet{}
	}
	s.dead = cause
	if d.leases[s.slot] == s {
		delete(d.leases, s.slot)
	}
	close(s.lost)
	var held []*entry
	d.eachLocked(s, func(e *entry) {
		if e.state == stateHeld {
			held = append(held, e)
		}
		d.removeLocked(e)
	})
	s.orphans = nil  // the lease takes its keys with it
	s.reserved = nil // every name of a dead lease is free: no key can have it any more
	return lostSet{held: held, err: fmt.Errorf("%w: lease %s: %w", driver.ErrNotHeld, s.hex, cause)}
}

// revokeSoon revokes a lease we gave up on, in the background and bounded, so
// that its keys stop blocking others at once rather than at its expiry.
func (d *Driver) revokeSoon(id clientv3.LeaseID) {
	d.held.Lock()
	defer d.held.Unlock()
	if d.held.ClosedLocked() {
		return // Close revokes what is left
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		// Not d.ctx: Close cancels that first, and lets revokes under way
		// finish within its own bound (closeRevokeTimeout).
		ctx, cancel := context.WithTimeout(d.revokeCtx, revokeTimeout)
		defer cancel()
		_, _ = d.c.Revoke(ctx, id)
	}()
}

// revokeBriefly revokes a lease, waiting at most closeRevokeTimeout.
func (d *Driver) revokeBriefly(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), closeRevokeTimeout)
	defer cancel()
	_, _ = d.c.Revoke(ctx, id)
}

// revokeTimeout bounds a revoke in the background; a lease not revoked in time
// expires by itself.
const revokeTimeout = 5 * time.Second

// closeRevokeTimeout bounds the revokes Close makes, all together: a frozen or
// unreachable server must not hold Close up (its leases then expire by
// themselves, a TTL after their last keepalive).
const closeRevokeTimeout = 500 * time.Millisecond

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
