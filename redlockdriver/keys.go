package redlockdriver

import "github.com/distlock/lock/internal/redislayout"

// keys are the names of a lock's keys, the same on every server, laid out as
// internal/redislayout says (redisdriver's layout, so a server shows a lock
// the same way to an operator whichever driver took it): this driver uses the
// lock key, holders, labels, forced, and of its own waiters (inbox channel ->
// registration deadline of a waiting driver), writers and grant (the
// exclusive holder's record "owner 0 since-µs label", outliving the lock by
// up to ten TTLs: recordKeep).
type keys = redislayout.Keys

func (d *Driver) keys(key string) keys { return redislayout.NewKeys(d.prefix, key) }
