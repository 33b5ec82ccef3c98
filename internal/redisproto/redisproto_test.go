package redisproto

import (
	"math"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	RouteGoRedis() // as the drivers do in their init
	leakcheck.VerifyTestMain(testserver.Main(m))
}

func TestMillisRoundsUpToAtLeastOne(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 1, time.Microsecond: 1, time.Millisecond: 1, 1500 * time.Microsecond: 2, time.Second: 1000} {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %d, want %d", d, got, want)
		}
	}
}

// Millis must cover d (never a shorter lock than asked) by less than one
// millisecond more, for every duration: the old rounding, d + 1ms - 1ns,
// overflowed near math.MaxInt64 and sent PX 1.
func FuzzMillis(f *testing.F) {
	for _, d := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - int64(time.Millisecond) + 2,
		math.MinInt64, -1, 0, 1, int64(time.Millisecond) - 1, int64(time.Millisecond), int64(time.Millisecond) + 1,
		int64(366 * 24 * time.Hour)} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		ms := Millis(d)
		if ms < 1 {
			t.Fatalf("Millis(%d) = %d, below 1", n, ms)
		}
		if d <= 0 {
			if ms != 1 {
				t.Fatalf("Millis(%d) = %d, want 1", n, ms)
			}
			return
		}
		// ms covers d and exceeds it by less than a millisecond; compared in
		// whole milliseconds and a remainder, so the check cannot overflow.
		whole, rest := int64(d/time.Millisecond), d%time.Millisecond
		switch {
		case rest == 0 && ms != max(whole, 1):
			t.Fatalf("Millis(%d) = %d, want %d", n, ms, max(whole, 1))
		case rest > 0 && ms != whole+1:
			t.Fatalf("Millis(%d) = %d, want %d", n, ms, whole+1)
		}
	})
}

func TestMillisOfTheLongestDurationIsItsMilliseconds(t *testing.T) {
	if got, want := Millis(math.MaxInt64), int64(math.MaxInt64/int64(time.Millisecond))+1; got != want {
		t.Errorf("Millis(math.MaxInt64) = %d, want %d", got, want)
	}
}

// FromMillis never overflows and is exact below its cap.
func FuzzFromMillis(f *testing.F) {
	for _, ms := range []int64{math.MaxInt64, math.MinInt64, -2, -1, 0, 1, 9223372036854, 9223372036855, int64(FromMillisCap / time.Millisecond)} {
		f.Add(ms)
	}
	f.Fuzz(func(t *testing.T, ms int64) {
		d := FromMillis(ms)
		switch {
		case ms < -int64(FromMillisCap/time.Millisecond):
			if d != -FromMillisCap {
				t.Fatalf("FromMillis(%d) = %v, want %v", ms, d, -FromMillisCap)
			}
		case ms > int64(FromMillisCap/time.Millisecond):
			if d != FromMillisCap {
				t.Fatalf("FromMillis(%d) = %v, want the cap %v", ms, d, FromMillisCap)
			}
		case int64(d/time.Millisecond) != ms || d%time.Millisecond != 0:
			t.Fatalf("FromMillis(%d) = %v, not exact", ms, d)
		}
	})
}
