package driver

import "time"

// Drift is the clock-drift allowance of a lock with the given TTL: TTL × 1% +
// 2ms, at most half the TTL. The portable layer counts a lock valid until
// Grant.Start + TTL − Drift(TTL); a driver that must judge validity itself (a
// majority lock deciding whether a late majority still counts) uses the same
// allowance, so the two never disagree.
func Drift(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/2)
}
