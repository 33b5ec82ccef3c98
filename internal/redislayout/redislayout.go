// Package redislayout is what redisdriver and redlockdriver share of the Redis
// lock layout, so that an operator reading a server sees a lock the same way
// whichever driver took it: the names of a lock's keys, the escaping that puts
// every key of a lock in one Cluster slot, the holder's record and its parser,
// the shared marker, how a server's restart is recognised (its run_id), and the
// timing of the drivers' pub/sub inbox.
//
// It uses the standard library only, so it lives in the root module: a driver
// at main then needs nothing of it that an earlier release of another module
// lacks (see Releasing in docs/DEVELOPING.md). What needs go-redis is in
// internal/redisproto.
package redislayout

import (
	"crypto/rand"
	"encoding/hex"
	"math"
	"strings"
	"time"
)

// DefaultPrefix is the namespace of every key when no prefix is given.
const DefaultPrefix = "distlock"

// The Redis keys of one lock. For the prefix P and the user's key K, with
// Escape applied to both:
//
//	P:{K}          the lock: a string holding the owner (redisdriver without
//	               fencing: the owner, a NUL and the label), or a marker
//	               starting with a NUL while shared holds or permits exist
//	               (SharedMarker), with the lock's TTL
//	P:{K}:holders  sorted set: shared or permit holder -> expiry (ms, server clock)
//	P:{K}:labels   hash: shared or permit holder -> its record (see ParseRecord)
//	P:{K}:forced   hash: owner evicted by ForceRelease -> "1", for a few TTLs
//	P:{K}:waiters  hash of the waiting requests (redisdriver: owner -> "lease
//	               ttl inbox"; redlockdriver: inbox channel -> deadline)
//
// and, by driver:
//
//	P:{K}:fence    redisdriver: the last fencing token, and after an exclusive
//	               grant the holder's record "token since-µs owner label"
//	P:{K}:queue    redisdriver: the waiting owners, oldest first
//	P:{K}:watch    redisdriver: the pub/sub channel told of changes (not a key)
//	P:{K}:grant    redlockdriver: the exclusive holder's record, "owner 0
//	               since-µs label" (no fencing token)
//	P:{K}:writers  redlockdriver: waiting exclusive owner -> deadline (ms)
//
// The braces are a Redis Cluster hash tag: only Escape(K) decides the slot,
// so the keys of a lock share a slot (one Lua script may touch them all);
// since Escape leaves no brace in P or K, a brace in a user's key cannot move
// its lock to another slot. Escape is injective, so distinct keys are distinct
// locks, and the lock key is the only one that ends with the closing brace
// (which List relies on).
const (
	Fence   = ":fence"
	Queue   = ":queue"
	Waiters = ":waiters"
	Holders = ":holders"
	Labels  = ":labels"
	Forced  = ":forced"
	Watch   = ":watch"
	Grant   = ":grant"
	Writers = ":writers"
)

// MaxTTL is the longest TTL the Redis drivers carry: every time.Duration. TTLs
// go to the server in whole milliseconds rounded up (redisproto.Millis), which
// cannot overflow, and at most 9.2e12 ms plus a server's clock fits Redis's
// 64-bit expiry time; package lock accepts less (driver.DefaultMaxTTL).
const MaxTTL = time.Duration(math.MaxInt64)

// NewInbox returns a new inbox channel under the escaped prefix,
// P:inbox:ID with a random ID: the pub/sub channel on which the scripts tell
// one driver of the locks released or handed to its waiters. It is a channel,
// not a key, and lies outside every lock's hash tag.
func NewInbox(prefix string) string {
	var id [12]byte
	_, _ = rand.Read(id[:]) // never fails: crypto/rand crashes the program instead
	return prefix + ":inbox:" + hex.EncodeToString(id[:])
}

// LockKey is the lock key P:{K} of key under the escaped prefix.
func LockKey(prefix, key string) string { return prefix + ":{" + Escape(key) + "}" }

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

var (
	escaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	unescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")
)

// Unescape reverses Escape.
func Unescape(s string) string { return unescaper.Replace(s) }

// GlobEscape makes s match itself in a SCAN MATCH pattern.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ScanPattern is the SCAN MATCH pattern of the lock keys, under the escaped
// prefix, of the user's keys that start with userPrefix: the lock keys are
// the only keys of a lock that end with the closing brace.
func ScanPattern(prefix, userPrefix string) string {
	return GlobEscape(prefix+":{"+Escape(userPrefix)) + "*}"
}

// UserKey returns the user's key whose lock key under the escaped prefix is
// name, if name is one and the key starts with userPrefix (a SCAN pattern
// also matches names that are not lock keys of ours, and an escaped prefix
// may match more than the user's prefix).
func UserKey(prefix, name, userPrefix string) (string, bool) {
	e, ok1 := strings.CutPrefix(name, prefix+":{")
	e, ok2 := strings.CutSuffix(e, "}")
	if !ok1 || !ok2 || strings.ContainsAny(e, "{}") {
		return "", false
	}
	user := Unescape(e)
	return user, strings.HasPrefix(user, userPrefix)
}

// Keys are the names of one lock's keys (see the constants above); a driver
// uses those of its layout and leaves the others unused.
type Keys struct {
	Lock, Fence, Queue, Waiters, Holders, Labels, Forced, Grant, Writers string

	Watch string // redisdriver's pub/sub channel told of changes (not a key)
}

// suffixes are the names of a lock's keys after the lock key's, in the order
// of Keys' fields.
var suffixes = [...]string{Fence, Queue, Waiters, Holders, Labels, Forced, Grant, Writers, Watch}

// NewKeys returns the names of the keys of key's lock under the escaped
// prefix. The names are parts of one string, built with one allocation:
// every call of a driver's hot path builds them.
func NewKeys(prefix, key string) Keys {
	e := Escape(key)
	n := len(prefix) + 2 + len(e) + 1 // len("P:{K}")
	size := 0
	for _, s := range suffixes {
		size += n + len(s)
	}
	var b strings.Builder
	b.Grow(size)
	var ends [len(suffixes)]int
	for i, s := range suffixes {
		b.WriteString(prefix)
		b.WriteString(":{")
		b.WriteString(e)
		b.WriteString("}")
		b.WriteString(s)
		ends[i] = b.Len()
	}
	all := b.String()
	part := func(i int) string {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		return all[start:ends[i]]
	}
	return Keys{
		Lock:    all[:n],
		Fence:   part(0),
		Queue:   part(1),
		Waiters: part(2),
		Holders: part(3),
		Labels:  part(4),
		Forced:  part(5),
		Grant:   part(6),
		Writers: part(7),
		Watch:   part(8),
	}
}
