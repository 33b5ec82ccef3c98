package driver

import "time"

// The timing rules of a held lock live here, once, for the portable layer and
// for drivers that keep a lease or a session alive themselves (etcd's
// keepalives, ZooKeeper's heartbeats): a lock is renewed at the same pace,
// retried at the same pace, and trusted for the same time wherever it is
// judged, so the layers never disagree about it.

// Drift is the clock-drift allowance of a lock with the given TTL (or of a
// session with the given timeout): TTL × 1% + 2ms, at most half the TTL. The
// portable layer counts a lock valid until Grant.Start + TTL − Drift(TTL); a
// driver that must judge validity itself (a majority lock deciding whether a
// late majority still counts, a lease or session the driver keeps alive) uses
// the same allowance, so the two never disagree.
func Drift(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/2)
}

// RefreshInterval is how long after a confirmed renewal the next one is due:
// a third of the TTL, so that two attempts can fail and a third still lands
// before the lock expires.
func RefreshInterval(ttl time.Duration) time.Duration { return ttl / 3 }

// RetryInterval is the pause before trying a renewal again after one whose
// outcome is unknown (a timeout, a lost connection): a tenth of the TTL, at
// least 5ms, so that several attempts fit before the validity ends, without
// hammering a backend that is struggling.
func RetryInterval(ttl time.Duration) time.Duration { return max(ttl/10, 5*time.Millisecond) }
