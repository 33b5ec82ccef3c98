package keyname

import (
	"strings"
	"testing"
)

var lower = Escaping{
	Keep:         func(_ string, _ int, c byte) bool { return 'a' <= c && c <= 'z' || c == '%' || c == '~' },
	MaxDirect:    16,
	HashedPrefix: 8,
}

func TestEscapedBytesDecodeBackAndPercentIsAlwaysEscaped(t *testing.T) {
	for in, want := range map[string]string{
		"abc":  "abc",
		"aBc":  "a%42c",
		"a%b":  "a%25b", // Keep said yes to '%', but '%' is always escaped
		"a~b":  "a%7Eb",
		"é":    "%C3%A9",
		"":     "",
		"a/..": "a%2F%2E%2E",
	} {
		if got := lower.Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLongNamesAreCutOutsideAnEscapeAndHashed(t *testing.T) {
	long := "abcdefg/" + strings.Repeat("x", 20)
	got := lower.Name(long)
	if !strings.HasPrefix(got, "abcdefg~") || len(got) != len("abcdefg~")+64 {
		t.Fatalf("Name(%q) = %q: want the prefix cut before the escape, then ~ and 64 hex digits", long, got)
	}
	if other := lower.Name(long + "y"); other == got {
		t.Fatalf("two long keys share the name %q", got)
	}
}

func FuzzNamesAreInjective(f *testing.F) {
	f.Add("a", "b")
	f.Add("a%42", "aB")
	f.Fuzz(func(t *testing.T, a, b string) {
		if a != b && lower.Name(a) == lower.Name(b) {
			t.Fatalf("%q and %q share the name %q", a, b, lower.Name(a))
		}
	})
}
