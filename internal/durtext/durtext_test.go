package durtext

import (
	"math"
	"testing"
	"time"
)

func TestDurationsReadAsPeopleWriteThem(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{time.Nanosecond, "1ns"},
		{10 * time.Millisecond, "10ms"},
		{1500 * time.Millisecond, "1.5s"},
		{30 * time.Second, "30s"},
		{2 * time.Minute, "2m"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + 5*time.Second, "1h0m5s"},
		{23*time.Hour + 59*time.Minute, "23h59m"},
		{24 * time.Hour, "1 day"},
		{366 * 24 * time.Hour, "366 days"},
		{366*24*time.Hour + 1, "366 days 1ns"},
		{2*24*time.Hour + 3*time.Hour, "2 days 3h"},
		{-30 * time.Second, "-30s"},
		{-48 * time.Hour, "-2 days"},
		{math.MaxInt64, "106751 days 23h47m16.854775807s"},
		{math.MinInt64, "-2562047h47m16.854775808s"},
	} {
		if got := Format(c.d); got != c.want {
			t.Errorf("Format(%d ns) = %q, want %q", int64(c.d), got, c.want)
		}
	}
}

// Two durations never share a text: an error naming a range's end is exact.
func TestDistinctDurationsHaveDistinctTexts(t *testing.T) {
	seen := map[string]time.Duration{}
	for _, base := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, 366 * 24 * time.Hour} {
		for _, delta := range []time.Duration{-time.Nanosecond, 0, time.Nanosecond, time.Millisecond, time.Second} {
			d := base + delta
			if prev, ok := seen[Format(d)]; ok && prev != d {
				t.Errorf("Format(%v) = Format(%v) = %q", d, prev, Format(d))
			}
			seen[Format(d)] = d
		}
	}
}
