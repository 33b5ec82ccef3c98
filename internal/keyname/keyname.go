// Package keyname turns lock keys into names for backends whose names allow
// fewer bytes than a key may hold (file names, znode names), reversibly and with
// a bounded length.
package keyname

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Escaping says which bytes a backend's names may hold as they are, and how
// long a name may grow before it is cut and hashed.
type Escaping struct {
	// Keep reports whether byte c at index i of s may be written as it is; every
	// other byte is escaped as %XX. Keep must refuse '%' and '~', or names stop
	// being injective.
	Keep func(s string, i int, c byte) bool
	// MaxDirect is the longest escaped form used whole; a longer one is cut.
	MaxDirect int
	// HashedPrefix is how much of a cut name's escaped form stays readable.
	HashedPrefix int
}

// Name maps s to a name that holds only kept bytes, '%', upper-case hex digits
// and '~', and differs for different s.
//
// Bytes that Keep refuses are written as %XX with upper-case hex digits, so
// decoding the escapes gives s back: names of up to MaxDirect bytes are
// injective outright. A longer escaped form is cut to HashedPrefix bytes (never
// inside an escape) and followed by '~' and the hex SHA-256 of the whole of s;
// '~' is always escaped, so a cut name never equals a whole one, and two cut
// names meet only if SHA-256 collides.
func (e Escaping) Name(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' && c != '~' && e.Keep(s, i, c) {
			b.WriteByte(c)
			continue
		}
		const hexDigits = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	esc := b.String()
	if len(esc) <= e.MaxDirect {
		return esc
	}
	cut := e.HashedPrefix
	if i := strings.LastIndexByte(esc[:cut], '%'); i >= 0 && i+3 > cut {
		cut = i // do not split an escape
	}
	sum := sha256.Sum256([]byte(s))
	return esc[:cut] + "~" + hex.EncodeToString(sum[:])
}
