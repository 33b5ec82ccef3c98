package redisdriver

import "strings"

// The Redis keys of one lock. For the prefix P and the user's key K, with
// esc() escaping '%', '{' and '}' as %25, %7B and %7D:
//
//	esc(P):{esc(K)}          the lock: a string holding the owner, with a TTL (PX)
//	esc(P):{esc(K)}:fence    the last fencing token granted for K
//	esc(P):{esc(K)}:queue    list of waiting owners, oldest first
//	esc(P):{esc(K)}:waiters  hash: waiting owner -> "lease-deadline-ms ttl-ms inbox-channel"
//
// The braces are a Redis Cluster hash tag: only esc(K) decides the slot, so the
// four keys of a lock always share a slot (one Lua script may touch them all),
// and since esc() leaves no brace in esc(P) or esc(K), a brace in a user's key
// cannot move its lock to another slot. esc() is injective, so distinct keys are
// distinct locks, and the lock key is the only one that ends with the closing
// brace. The suffix ":readers" is reserved for shared locks.
type keys struct {
	lock, fence, queue, waiters string
}

func (d *Driver) keys(key string) keys {
	base := d.prefix + ":{" + escape(key) + "}"
	return keys{lock: base, fence: base + ":fence", queue: base + ":queue", waiters: base + ":waiters"}
}

func (k keys) list() []string { return []string{k.lock, k.fence, k.queue, k.waiters} }

// escape replaces the bytes that could end or start a hash tag, and the escape
// character itself, by %XX.
func escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return escaper.Replace(s)
}

var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
