// Package durtext writes durations as people write them in messages: "366
// days", "1h", "90m" rather than time.Duration's "8784h0m0s", "1h0m0s",
// "1h30m0s". The portable layer's errors that name a duration use it, so that
// a range reads "[10ms, 366 days]".
package durtext

import (
	"strconv"
	"strings"
	"time"
)

const day = 24 * time.Hour

// Format returns d as people write it: whole days as "N days" (a remainder
// follows as "N days 3h"), the rest as time.Duration.String without its
// trailing zero units ("1h", "1h30m", "2m", "10ms", "1.5s"). Every distinct
// duration keeps a distinct text, so nothing is rounded away.
func Format(d time.Duration) string {
	if d < 0 {
		if d == -d { // math.MinInt64 has no positive counterpart
			return d.String()
		}
		return "-" + Format(-d)
	}
	if d < day {
		return trimZeroUnits(d.String())
	}
	days := int64(d / day)
	s := strconv.FormatInt(days, 10) + " days"
	if days == 1 {
		s = "1 day"
	}
	if rest := d % day; rest != 0 {
		s += " " + trimZeroUnits(rest.String())
	}
	return s
}

// trimZeroUnits drops the zero minutes and seconds that time.Duration.String
// writes after a larger unit: "1h0m0s" is "1h", "1h30m0s" is "1h30m", "2m0s"
// is "2m". Fractional or non-zero seconds stay.
func trimZeroUnits(s string) string {
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
