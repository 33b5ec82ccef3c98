package redisdriver

import (
	"strings"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

// The Redis keys of one lock. For the prefix P and the user's key K, with
// esc() escaping '%', '{' and '}' as %25, %7B and %7D:
//
//	esc(P):{esc(K)}          the lock: a string holding the owner (without fencing, the
//	                         owner, a NUL and the label), with a TTL (PX)
//	esc(P):{esc(K)}:fence    the last fencing token granted for K
//	esc(P):{esc(K)}:queue    list of waiting owners, oldest first
//	esc(P):{esc(K)}:waiters  hash: waiting owner -> "lease-deadline-ms ttl-ms inbox-channel",
//	                         prefixed "s" for a shared request and "pN/" for a permit of N
//	esc(P):{esc(K)}:holders  sorted set: shared holder or permit holder -> expiry (ms)
//	esc(P):{esc(K)}:labels   hash: shared or permit holder -> "token since-µs label";
//	                         waiting owner -> "0 0 label"; "\x00watch" -> the deadline (ms)
//	                         of the watchers' interest (see Watch)
//	esc(P):{esc(K)}:forced   hash: owner evicted by ForceRelease -> "1", for a few TTLs
//
// The fence record holds the last token alone, or after an exclusive grant
// "token since-µs owner label": the exclusive holder's record. The pub/sub
// channel esc(P):{esc(K)}:watch (a channel, not a key) is told of changes.
//
// The braces are a Redis Cluster hash tag: only esc(K) decides the slot, so the
// keys of a lock always share a slot (one Lua script may touch them all),
// and since esc() leaves no brace in esc(P) or esc(K), a brace in a user's key
// cannot move its lock to another slot. esc() is injective, so distinct keys are
// distinct locks, and the lock key is the only one that ends with the closing
// brace.
type keys struct {
	lock, fence, queue, waiters, holders, labels, forced string

	watch string // the pub/sub channel told of changes (not a key)
}

// suffixes are the names of a lock's keys after the lock key's, in the
// order of keys' fields (and of the scripts' KEYS).
var suffixes = [...]string{":fence", ":queue", ":waiters", ":holders", ":labels", ":forced", ":watch"}

func (d *Driver) keys(key string) keys {
	// The names are parts of one string: one allocation per call.
	e := redisproto.Escape(key)
	n := len(d.prefix) + 2 + len(e) + 1 // len("P:{K}")
	size := 0
	for _, s := range suffixes {
		size += n + len(s)
	}
	var b strings.Builder
	b.Grow(size)
	var ends [len(suffixes)]int
	for i, s := range suffixes {
		b.WriteString(d.prefix)
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
	return keys{
		lock:    all[:n],
		fence:   part(0),
		queue:   part(1),
		waiters: part(2),
		holders: part(3),
		labels:  part(4),
		forced:  part(5),
		watch:   part(6),
	}
}

// all is the keys of the scripts that grant and release, in the order of
// their KEYS (see common.lua). It leaves out forced, which only the scripts
// that evict, relabel and refresh read: every key costs the hot path.
func (k keys) all() []string {
	return []string{k.lock, k.fence, k.queue, k.waiters, k.holders, k.labels}
}

// withForced is all and forced, the KEYS of force.lua and relabel.lua.
func (k keys) withForced() []string {
	return []string{k.lock, k.fence, k.queue, k.waiters, k.holders, k.labels, k.forced}
}

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
