package lock

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// Owner ids. Every Acquire call needs an owner id (driver.Request.Owner) that
// no other holder or waiter of the key can have, in this process or any other,
// now or after a restart: drivers find a lock by (key, owner), and an id given
// twice would let one holder refresh or release another's lock.
//
// An id is a per-Locker prefix of 96 random bits, read from crypto/rand once
// when the Locker is made, followed by the Locker's own counter of calls:
//
//	<24 lowercase hex digits><the counter in lowercase hex, no leading zeros>
//
// Two ids of one Locker differ in their counters, which never repeat (a 64-bit
// counter does not wrap in centuries at a billion acquires a second). Two ids of
// different Lockers, in one process or in processes on any host at any time,
// differ in their prefixes unless two of the Lockers drew the same 96 bits: for
// k Lockers the chance of that is below k²/2⁹⁷ (below 10⁻¹¹ for a billion
// Lockers). The prefix has a fixed length, so no id of one Locker can read as
// another's. Reading crypto/rand once per Locker rather than per call takes it
// off the hot path.
//
// Ids are 25 to 40 characters of [0-9a-f], as the random ids before them were
// 32: what drivers rely on still holds (no space, which Redis's relabel script
// uses as a separator; no NUL, which marks its foreign holders; no newline,
// which etcd's values use; safe in ZooKeeper node names and file names).

// ownerPrefixLen is the length of an owner id's random prefix, in hex digits.
const ownerPrefixLen = 24

type ownerSource struct {
	prefix [ownerPrefixLen]byte
	seq    atomic.Uint64
}

// init draws the prefix.
func (s *ownerSource) init() {
	var b [ownerPrefixLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("lock: crypto/rand failed: " + err.Error())
	}
	hex.Encode(s.prefix[:], b[:])
}

// next returns the sequence number of a new owner id.
func (s *ownerSource) next() uint64 { return s.seq.Add(1) }

// appendOwner appends the owner id of sequence number n.
func (s *ownerSource) appendOwner(b []byte, n uint64) []byte {
	return strconv.AppendUint(append(b, s.prefix[:]...), n, 16)
}
