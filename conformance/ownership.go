package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// rawDriver opens a client used without the portable layer, to check the driver
// contract itself.
func (e *env) rawDriver() driver.Driver {
	e.Helper()
	d, err := e.h.NewDriver(e.ctx)
	if err != nil {
		e.Fatalf("Harness.NewDriver: %v", err)
	}
	e.Cleanup(func() { _ = d.Close() })
	return d
}

func (e *env) request(owner string) *driver.Request {
	return &driver.Request{Key: e.key, Owner: owner, TTL: e.ttl, Lost: driver.LostFunc(func(error) {})}
}

func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// A retry after a lost reply must find the lock already ours, with the same token,
// rather than fail or take a second lock.
func testRetriedAcquireBySameOwnerSucceeds(e *env) {
	d, other := e.rawDriver(), e.rawDriver()
	req := e.request(newOwner())
	g1, err := d.TryAcquire(e.ctx, req)
	if err != nil {
		e.Fatalf("TryAcquire: %v", err)
	}
	g2, err := d.TryAcquire(e.ctx, req)
	if err != nil {
		e.Fatalf("TryAcquire retried by the same owner: %v, want success", err)
	}
	if e.caps.Fencing && g2.Token != g1.Token {
		e.Errorf("retried TryAcquire gave token %d, first gave %d: want the same grant", g2.Token, g1.Token)
	}
	if a, ok := d.(driver.Acquirer); ok {
		g3, err := a.Acquire(e.ctx, req)
		if err != nil {
			e.Fatalf("Acquire retried by the same owner: %v, want success", err)
		}
		if e.caps.Fencing && g3.Token != g1.Token {
			e.Errorf("retried Acquire gave token %d, first gave %d", g3.Token, g1.Token)
		}
	}
	if _, err := other.TryAcquire(e.ctx, e.request(newOwner())); !errors.Is(err, driver.ErrLocked) {
		e.Fatalf("TryAcquire by another owner = %v, want ErrLocked", err)
	}
	if err := d.Release(e.ctx, req); err != nil {
		e.Fatalf("Release: %v", err)
	}
	next := e.request(newOwner())
	if _, err := other.TryAcquire(e.ctx, next); err != nil {
		e.Fatalf("TryAcquire after one Release of a retried acquire: %v (the retry left a second lock?)", err)
	}
	_ = other.Release(e.ctx, next)
}

// Release and Refresh by an owner that does not hold the lock fail with
// ErrNotHeld and leave the holder's lock alone.
func testReleaseAndRefreshCheckTheOwner(e *env) {
	d, other := e.rawDriver(), e.rawDriver()
	req := e.request(newOwner())
	if _, err := d.TryAcquire(e.ctx, req); err != nil {
		e.Fatalf("TryAcquire: %v", err)
	}
	for _, c := range []struct {
		name string
		d    driver.Driver
	}{{"another client", other}, {"the same client", d}} {
		foreign := e.request(newOwner())
		if err := c.d.Release(e.ctx, foreign); !errors.Is(err, driver.ErrNotHeld) {
			e.Errorf("Release by a foreign owner on %s = %v, want ErrNotHeld", c.name, err)
		}
		if err := c.d.Refresh(e.ctx, foreign); !errors.Is(err, driver.ErrNotHeld) {
			e.Errorf("Refresh by a foreign owner on %s = %v, want ErrNotHeld", c.name, err)
		}
	}
	probe := e.request(newOwner())
	if _, err := other.TryAcquire(e.ctx, probe); !errors.Is(err, driver.ErrLocked) {
		if err == nil {
			_ = other.Release(e.ctx, probe)
		}
		e.Fatalf("after foreign Release/Refresh, TryAcquire = %v, want ErrLocked: the holder's lock was removed", err)
	}
	if err := d.Refresh(e.ctx, req); err != nil {
		e.Errorf("holder's Refresh: %v", err)
	}
	if err := d.Release(e.ctx, req); err != nil {
		e.Errorf("holder's Release: %v", err)
	}
}

// staleHolder returns a lock that has passed from a to b, by expiry or by
// severing a's session, together with b's lock.
func (e *env) staleHolder(byExpiry bool) (stale, current *lock.Lock) {
	e.Helper()
	a, da := e.clientAndDriver()
	b := e.client()
	var la *lock.Lock
	if byExpiry {
		la = e.acquire(a, e.key, lock.WithAutoRefresh(false))
	} else {
		la = e.acquire(a, e.key)
		if err := e.h.Sever(e.ctx, da); err != nil {
			e.Fatalf("Harness.Sever: %v", err)
		}
	}
	lb, err := b.Acquire(e.ctx, e.key)
	if err != nil {
		e.Fatalf("Acquire after the first holder's lock %s: %v", map[bool]string{true: "expired", false: "was severed"}[byExpiry], err)
	}
	return la, lb
}

func testReleaseByExpiredHolderKeepsNewOwnersLock(e *env) {
	if !e.caps.Expiring {
		e.Skip("driver's locks are session-bound and never expire (Capabilities.Expiring is false); ReleaseBySeveredHolderKeepsNewOwnersLock covers the stale holder")
	}
	e.checkStaleRelease(true)

	// A holder paused past its TTL has not seen its own deadline, so its Release
	// reaches the driver, which must refuse it.
	d, d2 := e.rawDriver(), e.rawDriver()
	stale, next := e.request(newOwner()), e.request(newOwner())
	if _, err := d.TryAcquire(e.ctx, stale); err != nil {
		e.Fatalf("TryAcquire: %v", err)
	}
	e.rawAcquire(d2, next)
	if err := d.Release(e.ctx, stale); !errors.Is(err, driver.ErrNotHeld) {
		e.Errorf("driver Release by the expired holder = %v, want ErrNotHeld", err)
	}
	if err := d.Refresh(e.ctx, stale); !errors.Is(err, driver.ErrNotHeld) {
		e.Errorf("driver Refresh by the expired holder = %v, want ErrNotHeld", err)
	}
	probe := e.request(newOwner())
	if _, err := e.rawDriver().TryAcquire(e.ctx, probe); !errors.Is(err, driver.ErrLocked) {
		e.Fatalf("after the expired holder's Release, TryAcquire = %v, want ErrLocked: the new owner's lock was removed", err)
	}
	if err := d2.Release(e.ctx, next); err != nil {
		e.Errorf("new owner's Release: %v", err)
	}
}

// rawAcquire takes req on d without the portable layer, waiting as long as
// needed: while the key is held, and, as the portable layer's Acquire does,
// through transient failures (ErrUnavailable; on a loaded machine a Redlock
// majority can come back after the validity and be given back).
func (e *env) rawAcquire(d driver.Driver, req *driver.Request) driver.Grant {
	e.Helper()
	for {
		var g driver.Grant
		var err error
		what := "driver TryAcquire"
		if a, ok := d.(driver.Acquirer); ok {
			what = "driver Acquire"
			g, err = a.Acquire(e.ctx, req)
		} else {
			g, err = d.TryAcquire(e.ctx, req)
		}
		if err == nil {
			return g
		}
		if !errors.Is(err, driver.ErrLocked) && !errors.Is(err, driver.ErrUnavailable) {
			e.Fatalf("%s: %v", what, err)
		}
		select {
		case <-e.ctx.Done():
			e.Fatalf("%s: the lock never became free (last: %v)", what, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func testReleaseBySeveredHolderKeepsNewOwnersLock(e *env) { e.checkStaleRelease(false) }

func (e *env) checkStaleRelease(byExpiry bool) {
	stale, current := e.staleHolder(byExpiry)
	err := stale.Release(e.ctx)
	if !errors.Is(err, lock.ErrNotHeld) {
		e.Fatalf("Release by the stale holder = %v, want ErrNotHeld", err)
	}
	e.requireLocked(e.client(), e.key, "the new owner must still hold the lock after a stale Release")
	if err := current.Refresh(e.ctx); err != nil {
		e.Fatalf("new owner's Refresh after a stale Release: %v", err)
	}
	e.release(current)
}

func testRefreshByStaleHolderFails(e *env) {
	stale, current := e.staleHolder(e.caps.Expiring)
	var before uint64
	if e.caps.Fencing {
		before = current.Token()
	}
	err := stale.Refresh(e.ctx)
	if !errors.Is(err, lock.ErrNotHeld) {
		e.Fatalf("Refresh by the stale holder = %v, want ErrNotHeld", err)
	}
	if !isClosed(stale.Lost()) {
		e.Error("Lost() still open after Refresh reported the lock gone")
	}
	e.requireLocked(e.client(), e.key, "the new owner must still hold the lock after a stale Refresh")
	if e.caps.Fencing && current.Token() != before {
		e.Errorf("new owner's token changed from %d to %d", before, current.Token())
	}
	e.release(current)
}

func testReleaseTwiceIsSafe(e *env) {
	a, b := e.client(), e.client()
	l := e.acquire(a, e.key)
	e.release(l)
	if err := l.Release(e.ctx); err != nil {
		e.Fatalf("second Release = %v, want nil", err)
	}
	lb := e.acquire(b, e.key)
	if err := l.Release(e.ctx); err != nil {
		e.Fatalf("third Release = %v, want nil", err)
	}
	e.requireLocked(a, e.key, "a repeated Release must not free the next owner's lock")
	e.release(lb)
}
