package redisdriver

import (
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
)

// keys are the names of a lock's keys, laid out as internal/redislayout says:
// this driver uses the lock key, fence, queue, waiters, holders, labels,
// forced and the watch channel. The fence record holds the last token alone,
// or after an exclusive grant "token since-µs owner label": the exclusive
// holder's record.
type keys = redislayout.Keys

func (d *Driver) keys(key string) keys { return redislayout.NewKeys(d.prefix, key) }

// scriptKeys is the keys of the scripts that grant and release, in the order
// of their KEYS (see common.lua). It leaves out forced, which only the
// scripts that evict, relabel and refresh read: every key costs the hot path.
func scriptKeys(k keys) []string {
	return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Holders, k.Labels}
}

// scriptKeysWithForced is scriptKeys and forced, the KEYS of force.lua and
// relabel.lua.
func scriptKeysWithForced(k keys) []string {
	return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Holders, k.Labels, k.Forced}
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
