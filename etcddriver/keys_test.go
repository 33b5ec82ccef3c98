package etcddriver

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
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

// The set of names in use keeps any number of indexes: past the 64 of its
// bitmask too, as when 64 requests of one lease wait on one key.
func TestNameSetHoldsIndexesPastItsBitmask(t *testing.T) {
	var n nameSet
	for i := range 130 {
		n.add(i)
	}
	for i := range 130 {
		if !n.has(i) {
			t.Fatalf("index %d missing", i)
		}
	}
	n.remove(3)
	n.remove(100)
	if n.has(3) || n.has(100) || !n.has(4) || !n.has(101) || n.empty() {
		t.Fatal("remove took the wrong indexes")
	}
	for i := range 130 {
		n.remove(i)
	}
	if !n.empty() {
		t.Fatal("not empty after removing every index")
	}
}
