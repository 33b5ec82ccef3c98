package filedriver

import "github.com/distlock/lock/internal/keyname"

// lockSuffix ends every lock file name, so an operator can tell lock files apart.
const lockSuffix = ".lock"

const (
	// maxDirect is the longest escaped key used whole as a file name. Longer
	// keys are cut and hashed, which keeps every name (at most 64 + 1 + 64 + 5 =
	// 134 bytes) below the 143-byte limit of the strictest common file system
	// (eCryptfs), and far below the usual 255.
	maxDirect = 128
	// hashedPrefix is how much of a long key's escaped form stays readable.
	hashedPrefix = 64
)

// fileName maps a key to the name of its lock file.
func fileName(key string) string { return escapeName(key) + lockSuffix }

// escapeName maps s to a file name component that is legal on every POSIX file
// system, stays inside its directory, and differs for different s, also on
// case-insensitive file systems (macOS's default, vfat, casefolded ext4).
//
// Bytes outside [a-z0-9_.-] are written as %XX with upper-case hex digits, and so
// is a leading '.', so a name is never hidden, "." or "..", and never holds '/',
// NUL or an upper-case letter outside an escape. Decoding is unambiguous even
// after case folding, so names of up to maxDirect bytes are injective outright.
// A longer escaped form is cut to hashedPrefix bytes (never inside an escape) and
// followed by '~' and the hex SHA-256 of the whole of s; '~' is always escaped,
// so a cut name never equals a whole one, and two cut names meet only if SHA-256
// collides.
func escapeName(s string) string { return fileNames.Name(s) }

var fileNames = keyname.Escaping{
	Keep:         func(_ string, i int, c byte) bool { return isPlain(c) && (c != '.' || i > 0) },
	MaxDirect:    maxDirect,
	HashedPrefix: hashedPrefix,
}

func isPlain(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
}
