package run

import (
	"context"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// flaw is one deliberate defect of brokenStore.
type flaw int

const (
	flawNone flaw = iota
	// flawNoOwnerCheck: Release deletes the key whoever holds it.
	flawNoOwnerCheck
	// flawRefreshIgnoresLoss: Refresh succeeds for a lock that expired or
	// passed to another owner.
	flawRefreshIgnoresLoss
	// flawRepeatToken: every grant of a key has token 1.
	flawRepeatToken
	// flawLateGrant: every other grant is answered a TTL after the backend
	// made it, with Start claiming it was just made.
	flawLateGrant
)

type entry struct {
	owner   string
	expires time.Time
}

// brokenStore is a small expiring, fencing in-memory lock store shared by
// its drivers, with one flaw (or none, as the control).
type brokenStore struct {
	flaw  flaw
	mu    sync.Mutex
	held  map[string]entry
	token map[string]uint64
}

func newBrokenStore(f flaw) *brokenStore {
	return &brokenStore{flaw: f, held: map[string]entry{}, token: map[string]uint64{}}
}

func (s *brokenStore) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = map[string]entry{}
}

type brokenDriver struct{ s *brokenStore }

func (s *brokenStore) driver() (driver.Driver, error) { return brokenDriver{s}, nil }

func (d brokenDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: true, Expiring: true}
}

func (d brokenDriver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	s := d.s
	start := time.Now()
	s.mu.Lock()
	e, ok := s.held[req.Key]
	if ok && start.Before(e.expires) && e.owner != req.Owner {
		s.mu.Unlock()
		return driver.Grant{}, driver.ErrLocked
	}
	s.held[req.Key] = entry{req.Owner, start.Add(req.TTL)}
	if s.flaw != flawRepeatToken {
		s.token[req.Key]++
	} else {
		s.token[req.Key] = 1
	}
	tok := s.token[req.Key]
	s.mu.Unlock()
	if s.flaw == flawLateGrant && tok%2 == 0 {
		t := time.NewTimer(req.TTL)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return driver.Grant{}, ctx.Err()
		}
		start = time.Now()
	}
	return driver.Grant{Token: tok, Start: start}, nil
}

func (d brokenDriver) Refresh(_ context.Context, req *driver.Request) error {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.held[req.Key]
	if !ok || e.owner != req.Owner || !now.Before(e.expires) {
		if s.flaw == flawRefreshIgnoresLoss {
			return nil
		}
		return driver.ErrNotHeld
	}
	s.held[req.Key] = entry{req.Owner, now.Add(req.TTL)}
	return nil
}

func (d brokenDriver) Release(_ context.Context, req *driver.Request) error {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.held[req.Key]
	if s.flaw == flawNoOwnerCheck {
		delete(s.held, req.Key)
		return nil
	}
	if !ok || e.owner != req.Owner || !time.Now().Before(e.expires) {
		return driver.ErrNotHeld
	}
	delete(s.held, req.Key)
	return nil
}

func (d brokenDriver) Close() error { return nil }
