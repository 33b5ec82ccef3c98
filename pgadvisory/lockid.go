package pgadvisory

import (
	"crypto/sha256"
	"encoding/binary"
)

// LockID returns the PostgreSQL advisory lock id (the bigint given to
// pg_advisory_lock) of key under prefix: the first 8 bytes of the SHA-256 of
// the UTF-8 bytes of prefix, a newline and key, read as a big-endian two's
// complement integer. PostgreSQL 11 and later compute the same value with
//
//	('x' || encode(substring(sha256(convert_to(prefix || chr(10) || key, 'UTF8')) for 8), 'hex'))::bit(64)::bigint
//
// A prefix never contains a newline (control characters are refused), so the
// hash input is unambiguous: distinct (prefix, key) pairs meet only by a 64-bit
// SHA-256 collision, which nobody can force. See the package documentation for
// keys that a SQL string literal cannot hold.
func LockID(prefix, key string) int64 {
	h := sha256.New()
	h.Write([]byte(prefix))
	h.Write([]byte{'\n'})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]))
}
