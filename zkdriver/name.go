package zkdriver

import (
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"

	"github.com/distlock/lock/internal/keyname"
)

const (
	// maxDirect is the longest escaped key used whole as a znode name. ZooKeeper
	// sets no limit on a name, but every request carries the full path, and tools
	// (zkCli, Curator, Exhibitor) print it; longer keys are cut and hashed. A cut
	// name is at most hashedPrefix + 1 + 64 = 193 bytes.
	maxDirect = 200
	// hashedPrefix is how much of a long key's escaped form stays readable.
	hashedPrefix = 128
)

// escapeName maps s to one legal znode name: never "/", "." or "..", no
// character ZooKeeper refuses (controls, surrogates, private use, specials), and
// never the reserved "zookeeper". Distinct s give distinct names.
//
// Bytes outside [A-Za-z0-9_:.-] are written as %XX with upper-case hex digits,
// and so is a leading '.' (so a name is never "." or "..") and the 'z' of a whole
// name "zookeeper" (reserved at the root of the tree). Every byte that is not
// written literally is escaped, so decoding the %XX escapes gives s back: names
// of up to maxDirect bytes are injective outright. A longer escaped form is cut
// to hashedPrefix bytes (never inside an escape) and followed by '~' and the hex
// SHA-256 of the whole of s; '~' is always escaped, so a cut name never equals a
// whole one, and two cut names meet only if SHA-256 collides.
func escapeName(s string) string { return znodeNames.Name(s) }

var znodeNames = keyname.Escaping{
	Keep: func(s string, i int, c byte) bool {
		return isPlain(c) && !(c == '.' && i == 0) && !(i == 0 && s == "zookeeper")
	},
	MaxDirect:    maxDirect,
	HashedPrefix: hashedPrefix,
}

func isPlain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == ':'
}

// Lock node names follow Apache Curator's protected mode, which go-zookeeper's
// zk.Lock uses too: "_c_" + a unique marker + "-" + a kind, to which ZooKeeper
// appends a ten-digit sequence number. The marker lets a client whose create
// lost its reply find the node it made; the sequence after the kind orders
// the queue, and every participant sorts by it. The kinds are Curator's: an
// InterProcessMutex's (and zk.Lock's) "lock-", an InterProcessReadWriteLock's
// "__READ__" and "__WRIT__", and an InterProcessSemaphoreV2's "lease-".
const (
	protectedPrefix = "_c_"
	lockName        = "lock-"
	readName        = "__READ__"
	writeName       = "__WRIT__"
	leaseName       = "lease-"
)

// newMarker returns a random marker in the form Curator uses (a version 4 UUID),
// unique for each create attempt.
func newMarker() string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		panic("zkdriver: crypto/rand failed: " + err.Error())
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// nodePrefix is the name a node of kind is created with; ZooKeeper appends
// the sequence number.
func nodePrefix(marker, kind string) string { return protectedPrefix + marker + "-" + kind }

// hasMarker reports whether the node name was created with marker, whatever
// its kind (a marker is unique to one create).
func hasMarker(name, marker string) bool {
	return len(name) > len(protectedPrefix)+len(marker) && strings.HasPrefix(name, protectedPrefix) &&
		name[len(protectedPrefix):len(protectedPrefix)+len(marker)] == marker &&
		name[len(protectedPrefix)+len(marker)] == '-'
}

// sequence returns the sequence number of a lock node name: what follows the
// last "lock-", as Curator's StandardLockInternalsDriver.fixForSorting and
// go-zookeeper's zk.Lock read it. ok is false for a child that is not a lock
// node (it is then no competitor).
func sequence(name string) (seq int32, ok bool) { return sequenceAfter(name, lockName) }

// sequenceAfter returns the sequence number that follows the last kind in
// name.
func sequenceAfter(name, kind string) (seq int32, ok bool) {
	i := strings.LastIndex(name, kind)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len(kind):], 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// queued reads a child of a key node as a member of the queue: its sequence,
// and whether it is shared (a "__READ__" node) rather than exclusive (a
// "lock-" or "__WRIT__" node). ok is false for any other child (a
// semaphore's "locks" and "leases" nodes, say), which is no competitor.
// Curator's read-write lock orders its nodes by the sequence after either of
// its names, as this does across all three.
func queued(name string) (seq int32, shared, ok bool) {
	if seq, ok = sequenceAfter(name, lockName); ok {
		return seq, false, true
	}
	if seq, ok = sequenceAfter(name, writeName); ok {
		return seq, false, true
	}
	seq, ok = sequenceAfter(name, readName)
	return seq, true, ok
}

// before reports whether sequence a was handed out before b. ZooKeeper's
// counter is a signed 32-bit number that wraps from 2147483647 to -2147483648
// (ZOOKEEPER-2944); comparing in serial-number arithmetic (RFC 1982) keeps the
// queue in order across the wrap, as long as it spans less than 2^31 numbers.
// (Curator and zk.Lock compare plainly, so across a wrap they disagree with
// us and with each other.)
func before(a, b int32) bool { return int32(uint32(a)-uint32(b)) < 0 }

// predecessor finds our node among children and the node it waits for, or ""
// if it holds. An exclusive node waits for the node right before it in the
// queue, of any kind; a shared node for the nearest exclusive node before it
// (held or waiting), and holds when there is none: so readers run together,
// and a waiting writer holds back every reader queued after it. Each waiter
// watches only the one node whose deletion can let it in (no herd effect).
func predecessor(children []string, ours string) (pred string, present bool) {
	mine, shared, ok := queued(ours)
	if !ok {
		return "", false
	}
	var best int32
	for _, c := range children {
		if c == ours {
			present = true
			continue
		}
		s, sh, ok := queued(c)
		if !ok || !before(s, mine) || shared && sh {
			continue
		}
		if pred == "" || before(best, s) {
			pred, best = c, s
		}
	}
	return pred, present
}
