package kit

import (
	"testing"
	"time"

	"github.com/distlock/lock/driver"
)

// A tombstone outlives the evicted holder's last refresh attempts: three
// TTLs beyond TombstoneMin; an unknown TTL gets ten minutes.
func TestTombstoneLife(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{time.Second, 13 * time.Second},
		{30 * time.Second, 100 * time.Second},
		{10 * time.Millisecond, TombstoneMin + 30*time.Millisecond},
		{0, 10 * time.Minute},
		{-time.Second, 10 * time.Minute},
	} {
		if got := TombstoneLife(c.ttl); got != c.want {
			t.Errorf("TombstoneLife(%v) = %v; want %v", c.ttl, got, c.want)
		}
	}
	// The holder's validity ends one TTL after its last confirmed refresh,
	// which came at most a refresh interval before the eviction.
	for _, ttl := range []time.Duration{driver.FloorTTL, time.Second, time.Minute, time.Hour} {
		if life, need := TombstoneLife(ttl), driver.RefreshInterval(ttl)+ttl; life < need {
			t.Errorf("TombstoneLife(%v) = %v, less than the %v a holder may take to read it", ttl, life, need)
		}
	}
}
