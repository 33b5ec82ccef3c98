package pgadvisory

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/distlock/lock/driver"
)

// SetLockIDForTest replaces how d maps keys to lock ids, so a test can force two
// keys onto one id (a collision SHA-256 will not give it).
func SetLockIDForTest(d *Driver, lockID func(key string) int64) { d.lockID = lockID }

// ConnsForTest returns how many lock connections d has open.
func ConnsForTest(d *Driver) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// ExecOnLockSessionsForTest runs sql on every idle lock connection of d, as
// code sharing the session would (nothing can, outside tests).
func ExecOnLockSessionsForTest(d *Driver, sql string) error {
	d.mu.Lock()
	conns := append([]*lockConn(nil), d.conns...)
	d.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		_, err := c.conn.Exec(context.Background(), sql)
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// BusyConnsForTest returns how many lock connections of d have a statement in
// flight (a wait, a ping, a lock or unlock).
func BusyConnsForTest(d *Driver) int {
	d.mu.Lock()
	conns := append([]*lockConn(nil), d.conns...)
	d.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.mu.TryLock() {
			c.mu.Unlock()
		} else {
			n++
		}
	}
	return n
}

// ContendedForTest reports whether d found the key held a moment ago (and so
// waits for it without a try first).
func ContendedForTest(d *Driver, key string) bool { return d.contended(d.lockID(key)) }

// SetStatementGraceForTest sets how long a statement on a lock session may go
// unanswered after its caller's context ended before the session is given up,
// so that a test can thaw a frozen server before that happens. Call it before
// d takes its first lock.
func SetStatementGraceForTest(d *Driver, grace time.Duration) { d.grace = grace }

// HoldingsForTest returns how many entries d's books keep by owner: held
// locks, and unlocks whose outcome a later Release or Refresh is to learn.
func HoldingsForTest(d *Driver) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.byOwner)
}

// OpenForTest opens a Driver from a postgres URL as lock.Open's opener does,
// with options given in code as well (the URL's parameters override them), for
// tests that need the *Driver itself. A URL that does not parse is reported
// without any of its text, so that no password can show.
func OpenForTest(ctx context.Context, rawURL string, opts ...Option) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: pgadvisory: the URL does not parse", driver.ErrInvalidURL)
	}
	return openURL(ctx, u, opts)
}

// SetPermitRescanForTest sets how often d's waiting permit requests try every
// slot again, without and with its listening session in force.
func SetPermitRescanForTest(d *Driver, quiet, listening time.Duration) {
	d.rescan = [2]time.Duration{quiet, listening}
}

// PermitListeningForTest reports whether d's session listening for permits
// given back is in force.
func PermitListeningForTest(d *Driver) bool {
	d.mu.Lock()
	l := d.listener
	d.mu.Unlock()
	if l == nil {
		return false
	}
	select {
	case <-l.ready:
		return true
	default:
		return false
	}
}

// ListenerPIDForTest returns the backend pid of d's listening session, or 0
// when none is connected.
func ListenerPIDForTest(d *Driver) uint32 {
	d.mu.Lock()
	l := d.listener
	d.mu.Unlock()
	if l == nil {
		return 0
	}
	select {
	case <-l.ready:
		return l.pid.Load()
	default:
		return 0
	}
}

// CreateHoldersSQLForTest is the statement that creates the holders table (%s: its name).
const CreateHoldersSQLForTest = createHoldersSQL

// PermitAnnouncementsForTest returns how many permits given back d's
// listening session has heard announced, and the slot id of the last (0, 0
// without a listening session).
func PermitAnnouncementsForTest(d *Driver) (heard, last int64) {
	d.mu.Lock()
	l := d.listener
	d.mu.Unlock()
	if l == nil {
		return 0, 0
	}
	return l.heard.Load(), l.last.Load()
}

// DefaultConnectTimeout is connect_timeout when the URL sets none.
const DefaultConnectTimeout = defaultConnectTimeout
