// Package redisproto holds what redisdriver and redlockdriver share of the
// Redis lock protocol, so the two lay out and address a lock the same way: the
// escaping of keys inside a Cluster hash tag, TTL arguments in milliseconds,
// how a missing script is answered, and the go-redis URL parameters a server
// URL may carry.
package redisproto

import (
	"strings"
	"time"
)

// Escape replaces the bytes that could end or start a hash tag, and the escape
// character itself, by %XX ('%' → %25, '{' → %7B, '}' → %7D). It is injective
// and leaves no brace, so "P:{" + Escape(K) + "}" puts distinct keys in
// distinct locks and only K decides the Cluster slot.
func Escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return escaper.Replace(s)
}

var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// Millis is d in whole milliseconds, rounded up (a lock never lives shorter on
// the server than the caller asked), at least 1.
func Millis(d time.Duration) int64 {
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
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
