package etcddriver

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

func TestEscapedKeysStayOneComponent(t *testing.T) {
	for key, want := range map[string]string{
		"invoice:42":       "invoice:42",
		"a/b":              "a%2Fb",
		"a_b":              "a_b",
		"a%2Fb":            "a%252Fb",
		"../a":             "..%2Fa",
		"..":               "..",
		"a b\x00\n":        "a%20b%00%0A",
		"user@example.com": "user@example.com",
		"ключ/🔒":           "ключ%2F🔒",
		"{a}*":             "%7Ba%7D%2A",
	} {
		if got := escapeKey(key); got != want {
			t.Errorf("escapeKey(%q) = %q, want %q", key, got, want)
		}
	}
	if got := rangePrefix("/p", "a"); got != "/p/a/" {
		t.Errorf("rangePrefix = %q", got)
	}
}

// Distinct keys get distinct etcd names, none with a "/", and no key's range
// contains another key's contenders.
func FuzzEscapeKey(f *testing.F) {
	for _, s := range []string{"", "/", "../x", "a/b", "a_b", "a:b", "{t}", "\x00", "%", "%2F", "é", "e\u0301", strings.Repeat("é", 512)} {
		f.Add(s, s+"/")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := escapeKey(a), escapeKey(b)
		if strings.Contains(ea, "/") {
			t.Fatalf("escapeKey(%q) = %q contains a slash", a, ea)
		}
		// unescapeKey (List's) inverts escapeKey: that it exists proves
		// escapeKey injective.
		if back, ok := unescapeKey(ea); !ok || back != a {
			t.Fatalf("escapeKey(%q) = %q does not decode back (%q, %v)", a, ea, back, ok)
		}
		if utf8.ValidString(a) && !utf8.ValidString(ea) {
			t.Fatalf("escapeKey(%q) = %q is not valid UTF-8", a, ea)
		}
		if a != b {
			if ea == eb {
				t.Fatalf("keys %q and %q both escape to %q", a, b, ea)
			}
			if strings.HasPrefix(rangePrefix("/p", b), rangePrefix("/p", a)) {
				t.Fatalf("the range of %q contains the range of %q", a, b)
			}
		}
	})
}

func TestKeyNameIsRangePrefixShapeAndLease(t *testing.T) {
	for _, c := range []struct {
		req   driver.Request
		index int
		want  string
	}{
		{driver.Request{Key: "a/b"}, 0, "/p/a%2Fb/694d"},
		{driver.Request{Key: "a/b"}, 3, "/p/a%2Fb/694d_3"},
		{driver.Request{Key: "k", Shared: true}, 0, "/p/k/read/694d"},
		{driver.Request{Key: "k", Permits: 5}, 70, "/p/k/sem/5/694d_70"},
	} {
		key, rngLen := keyName("/p", &c.req, "694d", c.index)
		if key != c.want || key[:rngLen] != rangePrefix("/p", c.req.Key) {
			t.Errorf("keyName(%+v, %d) = %q, %d; want %q with range %q", c.req, c.index, key, rngLen, c.want, rangePrefix("/p", c.req.Key))
		}
	}
}

// A request gets the lowest name index its lease does not use on its key:
// past the 64 of the bitmask too (as when 64 requests of one lease wait on one
// key), a freed index again, and never one reserved after a release whose
// outcome is unknown; other keys and other leases do not count.
func TestNameIndexesAreLowestFreeAndSkipReserved(t *testing.T) {
	d := &Driver{prefix: "/p", held: kit.NewBook[string, *entry]()}
	s, other := &session{d: d, hex: "694d"}, &session{d: d, hex: "694e"}
	enter := func(s *session, key string, n int) *entry {
		return d.enterLocked(s, &driver.Request{Key: key, Owner: strconv.Itoa(n)})
	}
	var es []*entry
	for i := range 130 {
		e := enter(s, "k", i)
		if int(e.index) != i {
			t.Fatalf("request %d got index %d", i, e.index)
		}
		es = append(es, e)
	}
	if e := enter(other, "k", 1000); e.index != 0 {
		t.Fatalf("another lease's first request got index %d", e.index)
	}
	if e := enter(s, "j", 1001); e.index != 0 {
		t.Fatalf("another key's first request got index %d", e.index)
	}
	d.removeLocked(es[3])
	es[100].uncertain = true
	d.removeLocked(es[100])
	d.removeLocked(es[101])
	for _, want := range []int32{3, 101, 130} {
		if e := enter(s, "k", int(2000+want)); e.index != want {
			t.Fatalf("got index %d, want %d", e.index, want)
		}
	}
	if got := d.lookupLocked(es[50].req); got != es[50] {
		t.Fatal("lookup lost an entry")
	}
	if d.lookupLocked(es[3].req) != nil {
		t.Fatal("a removed entry is still found")
	}
	n := 0
	d.eachLocked(s, func(*entry) { n++ })
	if n != s.entries || n != 130+1+3-3 {
		t.Fatalf("%d entries of the session, count %d", n, s.entries)
	}
}
