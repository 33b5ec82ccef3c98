package pgadvisory

// SetLockIDForTest replaces how d maps keys to lock ids, so a test can force two
// keys onto one id (a collision SHA-256 will not give it).
func SetLockIDForTest(d *Driver, lockID func(key string) int64) { d.lockID = lockID }

// ConnsForTest returns how many lock connections d has open.
func ConnsForTest(d *Driver) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}
