package etcddriver

import (
	"strings"
	"testing"
	"unicode/utf8"
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
