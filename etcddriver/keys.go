package etcddriver

import (
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
)

// The key layout is the one of etcd's concurrency.Mutex and etcdctl lock, so that
// their locks and ours exclude each other:
//
//	<prefix>/<escaped key>/<lease ID in hex>
//
// concurrency.NewMutex(session, "<prefix>/<escaped key>") and
// etcdctl lock "<prefix>/<escaped key>" write the same shape with their own
// session's lease. Every key in the range "<prefix>/<escaped key>/" is a
// contender; the one with the lowest create revision holds the lock. Shared
// holds and semaphore permits queue in the same range under read/ and
// sem/<n>/ (see shapes.go).

// escapeKey maps a user key to one component of an etcd key. ASCII letters,
// digits and - . _ ~ : @ stay as they are, as do bytes of multi-byte UTF-8
// sequences (so non-Latin keys stay readable in etcdctl); every other byte,
// including "/" and "%", becomes %XX. Because "%" itself is escaped the mapping is
// injective, and because "/" is, an escaped key is always exactly one component:
// "a/b", "a_b", "a%2Fb" and "../a" are four different locks, and none reaches
// outside the prefix or into another key's range.
func escapeKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	writeEscaped(&b, key)
	return b.String()
}

func writeEscaped(b *strings.Builder, key string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keepByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
}

// keyName is the name of the index-th request of lease leaseHex on req's key,
// <prefix>/<escaped key>/[read/ or sem/<n>/]<lease hex>[_<index>], built in
// one allocation, and the length of its range prefix (rangePrefix), which the
// entry keeps as a substring of it.
func keyName(prefix string, req *driver.Request, leaseHex string, index int) (key string, rngLen int) {
	var b strings.Builder
	shape := namePrefix(req)
	b.Grow(len(prefix) + len(req.Key) + len(shape) + len(leaseHex) + 8)
	b.WriteString(prefix)
	b.WriteByte('/')
	writeEscaped(&b, req.Key)
	b.WriteByte('/')
	rngLen = b.Len()
	b.WriteString(shape)
	b.WriteString(leaseHex)
	if index > 0 {
		b.WriteByte('_')
		b.WriteString(strconv.Itoa(index))
	}
	return b.String(), rngLen
}

func keepByte(c byte) bool {
	switch {
	case c >= 0x80:
		return true
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', ':', '@':
		return true
	}
	return false
}

// lockPrefix is the name concurrency.NewMutex and etcdctl lock take for key.
func lockPrefix(prefix, key string) string { return prefix + "/" + escapeKey(key) }

// rangePrefix is the range every contender for key lives in; the trailing "/"
// keeps key "a" from seeing the contenders of key "ab" (etcd issue #6278).
func rangePrefix(prefix, key string) string { return lockPrefix(prefix, key) + "/" }

// leaseHex formats a lease ID as concurrency.Mutex does (fmt's %x of the ID).
func leaseHex(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

// normalizePrefix drops trailing slashes; an empty prefix is the default.
func normalizePrefix(p string) string {
	p = strings.TrimRight(p, "/")
	if p == "" {
		return DefaultPrefix
	}
	return p
}
