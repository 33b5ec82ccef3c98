package redisdriver

import (
	"strings"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

// The Redis keys of one lock. For the prefix P and the user's key K, with
// esc() escaping '%', '{' and '}' as %25, %7B and %7D:
//
//	esc(P):{esc(K)}          the lock: a string holding the owner, with a TTL (PX)
//	esc(P):{esc(K)}:fence    the last fencing token granted for K
//	esc(P):{esc(K)}:queue    list of waiting owners, oldest first
//	esc(P):{esc(K)}:waiters  hash: waiting owner -> "lease-deadline-ms ttl-ms inbox-channel",
//	                         prefixed "s" for a shared request and "pN/" for a permit of N
//	esc(P):{esc(K)}:holders  sorted set: shared holder or permit holder -> expiry (ms)
//
// The braces are a Redis Cluster hash tag: only esc(K) decides the slot, so the
// keys of a lock always share a slot (one Lua script may touch them all),
// and since esc() leaves no brace in esc(P) or esc(K), a brace in a user's key
// cannot move its lock to another slot. esc() is injective, so distinct keys are
// distinct locks, and the lock key is the only one that ends with the closing
// brace.
type keys struct {
	lock, fence, queue, waiters string
}

func (d *Driver) keys(key string) keys {
	// The four names are parts of one string: one allocation per call.
	e := redisproto.Escape(key)
	n := len(d.prefix) + 2 + len(e) + 1 // len("P:{K}")
	var b strings.Builder
	b.Grow(3*n + len(":fence:queue:waiters"))
	for _, suffix := range []string{":fence", ":queue", ":waiters"} {
		b.WriteString(d.prefix)
		b.WriteString(":{")
		b.WriteString(e)
		b.WriteString("}")
		b.WriteString(suffix)
	}
	all := b.String()
	return keys{
		lock:    all[:n],
		fence:   all[:n+6],
		queue:   all[n+6 : 2*n+12],
		waiters: all[2*n+12:],
	}
}

func (k keys) list() []string { return []string{k.lock, k.fence, k.queue, k.waiters} }

// holders is the sorted set of a key's shared holds or permits, by expiry.
func (k keys) holders() string { return k.lock + ":holders" }

// all is list and holders: the keys of the scripts that may grant a shared
// hold or a permit.
func (k keys) all() []string { return []string{k.lock, k.fence, k.queue, k.waiters, k.holders()} }

// shape is what the scripts call n: 0 for a shared hold, the number of
// permits for a permit, -1 for the exclusive lock.
func shape(req *driver.Request) int {
	switch {
	case req.Permits > 1:
		return req.Permits
	case req.Shared:
		return 0
	}
	return -1
}
