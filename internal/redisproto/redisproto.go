// Package redisproto holds what redisdriver and redlockdriver share of the
// Redis client side, which needs go-redis: TTL arguments in milliseconds, how a
// missing script is answered, dialling, error classes, the log sink and the
// go-redis URL parameters a server URL may carry. The lock's layout on the
// server (keys, records, escaping) is internal/redislayout's.
package redisproto

import (
	"strings"
	"time"
)

// Millis is d in whole milliseconds, rounded up (a lock never lives shorter on
// the server than the caller asked), at least 1. It cannot overflow: the
// rounding is added to the quotient, not to d, so every time.Duration up to
// math.MaxInt64 (about 292 years, 9.2e12 ms) maps to the milliseconds that
// cover it.
func Millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return max(ms, 1)
}

// FromMillisCap is where FromMillis saturates: 2^62 ns in whole milliseconds,
// about 146 years, far beyond any TTL, and far enough below the largest
// time.Duration that adding a margin to a converted value cannot overflow.
const FromMillisCap = time.Duration(1<<62) / time.Millisecond * time.Millisecond

// FromMillis is ms milliseconds (a PTTL, a wait hint from a script) as a
// time.Duration, saturating at FromMillisCap: a key set by another client can
// carry any 64-bit expiry, and ms*time.Millisecond would overflow above 9.2e12.
// A negative ms (Redis's -1 and -2) stays negative, saturating at
// -FromMillisCap.
func FromMillis(ms int64) time.Duration {
	const limit = int64(FromMillisCap / time.Millisecond)
	return time.Duration(min(max(ms, -limit), limit)) * time.Millisecond
}

// IsNoScript reports whether err is the server's answer to EVALSHA of a script
// it does not have (a restart, a failover, SCRIPT FLUSH).
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// URLParams are the query parameters go-redis v9.22's ParseURL understands,
// less context_timeout_enabled (the drivers always honour deadlines) and, for
// rediss URLs, skip_verify, which the drivers add. The drivers' tests check
// them against the parser.
var URLParams = []string{
	"client_name", "conn_max_idle_time", "conn_max_lifetime", "conn_max_lifetime_jitter",
	"db", "dial_timeout", "idle_timeout", "max_active_conns", "max_concurrent_dials",
	"max_conn_age", "max_idle_conns", "max_retries", "max_retry_backoff", "min_idle_conns",
	"min_retry_backoff", "pool_fifo", "pool_size", "pool_timeout", "protocol",
	"read_timeout", "write_timeout",
}
