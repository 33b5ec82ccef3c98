package pgadvisory

import (
	"context"
	"time"
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
