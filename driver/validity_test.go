package driver

import (
	"testing"
	"time"
)

// A renewal retried at RetryInterval gets several attempts between the due
// time and the end of the validity, for every TTL a driver may grant.
func TestRetriesFitBetweenTheRefreshAndTheEndOfValidity(t *testing.T) {
	for _, ttl := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, time.Second, 30 * time.Second, time.Hour} {
		window := ttl - Drift(ttl) - RefreshInterval(ttl)
		if n := window / RetryInterval(ttl); n < 5 {
			t.Errorf("TTL %v: %d retries fit after the refresh is due, want at least 5", ttl, n)
		}
	}
}

func TestDriftIsOnePercentPlusTwoMillisecondsAtMostHalfTheTTL(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		time.Second:          12 * time.Millisecond,
		10 * time.Second:     102 * time.Millisecond,
		2 * time.Millisecond: time.Millisecond,
		time.Millisecond:     time.Millisecond / 2,
	} {
		if got := Drift(ttl); got != want {
			t.Errorf("Drift(%v) = %v, want %v", ttl, got, want)
		}
	}
}
