package redislayout

import (
	"strconv"
	"strings"
)

// SharedMarker is the lock key's value while shared holds exist: it starts
// with a NUL, which no owner holds, so no owner compares equal to it, and a
// standard SET NX client finds the key taken. redisdriver's semaphore of n
// marks the key "\x00permits n".
const SharedMarker = "\x00shared"

// ParseRecord reads a holder's record, "token since-µs label": the fencing
// token (0 where there is none: redisdriver without fencing, redlockdriver),
// when the hold was granted in microseconds of the Unix epoch (0: unknown),
// and the label, which may hold spaces. Both drivers store it, after the
// owner where the record is not keyed by owner (redisdriver's fence record,
// redlockdriver's grant record).
func ParseRecord(rec string) (tok uint64, us int64, label string, ok bool) {
	t, rest, ok1 := strings.Cut(rec, " ")
	s, label, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return 0, 0, "", false
	}
	tok, err1 := strconv.ParseUint(t, 10, 64)
	us, err2 := strconv.ParseInt(s, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return tok, us, label, true
}
