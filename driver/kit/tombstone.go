package kit

import "time"

// Tombstone lifetimes: see TombstoneLife.
const (
	// TombstoneMin is the least time a tombstone lives, whatever the TTL.
	TombstoneMin = 10 * time.Second
	// UnknownTTLTombstoneLife is the life of a tombstone of a lock whose TTL
	// the evicting process cannot learn (a ZooKeeper node, an etcd key
	// without a lease, a holder file): TombstoneLife of a three-minute TTL,
	// rounded up to ten minutes.
	UnknownTTLTombstoneLife = 10 * time.Minute
)

// TombstoneLife is how long the tombstone that ForceRelease leaves for an
// evicted lock lives, so that the evicted holder learns that it was evicted
// (driver.ErrForceReleased) rather than only that its lock is gone:
// TombstoneMin plus three times ttl, the lock's TTL, or what was left of it
// when only that is known. The holder's refreshes come every third of its
// TTL and are retried until its validity ends, a TTL after the last one
// confirmed, so a holder still running reads its tombstone within one TTL
// of the eviction; three leave room for a holder slowed by load, and
// TombstoneMin for clocks and scheduling on short TTLs. A holder that reads
// nothing for longer has lost its lock by its own validity anyway. A ttl of
// zero or less (not known) gives UnknownTTLTombstoneLife.
func TombstoneLife(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return UnknownTTLTombstoneLife
	}
	return TombstoneMin + 3*ttl
}
