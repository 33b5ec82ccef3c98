package redlockdriver

import "github.com/distlock/lock/internal/redisproto"

// The Redis keys of one lock, the same on every server. For the prefix P and
// the user's key K, with esc() escaping '%', '{' and '}' as %25, %7B and %7D:
//
//	esc(P):{esc(K)}          the lock: a string holding the owner, with a TTL (PX)
//	esc(P):{esc(K)}:waiters  hash: inbox channel -> registration deadline (ms,
//	                         server clock) of a driver waiting for the lock
//	esc(P):{esc(K)}:holders  sorted set: the owners of shared holds, scored by
//	                         their expiry (ms, server clock)
//	esc(P):{esc(K)}:writers  hash: owner -> registration deadline (ms, server
//	                         clock) of a waiting exclusive request
//	esc(P):{esc(K)}:grant    the exclusive holder's record, "owner 0 since-µs
//	                         label" (0: no fencing token), outliving the
//	                         lock by up to ten TTLs (recordKeep)
//	esc(P):{esc(K)}:labels   hash: shared holder -> its record, "0 since-µs label"
//	esc(P):{esc(K)}:forced   hash: owner evicted by ForceRelease -> "1", for a
//	                         few TTLs
//
// This is redisdriver's layout for the lock, its shared marker, holders,
// records and tombstones (less its fence and queue keys), so a server
// shows a lock the same way to an operator whichever driver took it. The braces
// are a Redis Cluster hash tag, which keeps both keys of a lock in one slot when
// a server given to New is a Cluster. esc() is injective, so distinct keys are
// distinct locks.
type keys struct {
	lock, waiters, holders, writers, grant, labels, forced string
}

func (d *Driver) keys(key string) keys {
	lock := d.lockKey(key)
	return keys{lock: lock, waiters: lock + ":waiters", holders: lock + ":holders", writers: lock + ":writers",
		grant: lock + grantSuffix, labels: lock + ":labels", forced: lock + forcedSuffix}
}

// Suffixes of the keys refreshCalls and tombstones build as well as keys.
const (
	grantSuffix  = ":grant"
	forcedSuffix = ":forced"
)

func (d *Driver) lockKey(key string) string { return d.prefix + ":{" + redisproto.Escape(key) + "}" }
