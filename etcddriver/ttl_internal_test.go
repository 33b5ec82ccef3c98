package etcddriver

import (
	"math"
	"testing"
	"time"
)

// leaseSeconds never overflows: for every Duration it either refuses the TTL or
// returns the smallest whole number of seconds that covers it, within etcd's
// bounds.
func FuzzLeaseSecondsCoversTheTTLWithoutOverflow(f *testing.F) {
	for _, ttl := range []int64{math.MinInt64, -1, 0, 1, int64(time.Second) - 1, int64(time.Second), int64(2 * time.Second),
		int64(maxLeaseTTL) - 1, int64(maxLeaseTTL), int64(maxLeaseTTL) + 1, math.MaxInt64 - int64(time.Second) + 1, math.MaxInt64} {
		f.Add(ttl)
	}
	d := &Driver{minTTL: 2 * time.Second}
	f.Fuzz(func(t *testing.T, n int64) {
		ttl := time.Duration(n)
		secs, err := d.leaseSeconds(ttl)
		if ttl < d.minTTL || ttl > maxLeaseTTL {
			if err == nil {
				t.Fatalf("leaseSeconds(%d ns) = %d, want an error", n, secs)
			}
			return
		}
		if err != nil {
			t.Fatalf("leaseSeconds(%d ns): %v", n, err)
		}
		if secs < 1 || secs > maxLeaseSeconds {
			t.Fatalf("leaseSeconds(%d ns) = %d, outside [1, %d]", n, secs, int64(maxLeaseSeconds))
		}
		want := n / int64(time.Second)
		if n%int64(time.Second) != 0 {
			want++
		}
		if secs != want {
			t.Fatalf("leaseSeconds(%d ns) = %d, want %d: the TTL rounded up to whole seconds", n, secs, want)
		}
	})
}
