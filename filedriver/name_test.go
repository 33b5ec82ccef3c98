package filedriver

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
)

var trickyKeys = []string{
	"a", "A", "a/b", "a_b", "a:b", "a%2Fb", "a%2fb", "../x", "..", ".", ".x", "%2Ex",
	"x\x00y", "x\ny", "~", "a~b", "日本語", "ǅ", "Ǆ", "ǆ", "ß", "SS", " ", "\t",
	strings.Repeat("a", driver.MaxKeyLen), strings.Repeat("a", driver.MaxKeyLen-1) + "b",
	strings.Repeat("/", driver.MaxKeyLen), strings.Repeat("é", driver.MaxKeyLen/2),
	strings.Repeat("a", maxDirect), strings.Repeat("a", maxDirect+1),
}

func TestTrickyKeysGetDistinctLegalFileNames(t *testing.T) {
	seen := map[string]string{}
	for _, k := range trickyKeys {
		name := fileName(k)
		checkLegal(t, k, name)
		folded := strings.ToLower(name)
		if other, dup := seen[folded]; dup {
			t.Errorf("keys %q and %q both map to %q (case-folded)", other, k, name)
		}
		seen[folded] = k
	}
}

func TestShortKeysKeepReadableNames(t *testing.T) {
	for key, want := range map[string]string{
		"invoice-42":  "invoice-42.lock",
		"invoice:42":  "invoice%3A42.lock",
		"Job.Nightly": "%4Aob.%4Eightly.lock",
		"../x":        "%2E.%2Fx.lock",
	} {
		if got := fileName(key); got != want {
			t.Errorf("fileName(%q) = %q, want %q", key, got, want)
		}
	}
}

// FuzzFileName checks that file names are legal and injective: a name of a key
// short enough to be used whole decodes back to the key, a cut name carries the
// key's hash, and two different keys never share a name, even case-folded.
func FuzzFileName(f *testing.F) {
	for i, k := range trickyKeys {
		f.Add(k, trickyKeys[(i+1)%len(trickyKeys)])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !validKey(a) || !validKey(b) {
			t.Skip()
		}
		na, nb := fileName(a), fileName(b)
		checkLegal(t, a, na)
		checkLegal(t, b, nb)
		if a != b && strings.EqualFold(na, nb) {
			t.Fatalf("keys %q and %q map to %q and %q", a, b, na, nb)
		}
	})
}

func validKey(k string) bool { return k != "" && len(k) <= driver.MaxKeyLen && utf8.ValidString(k) }

// checkLegal asserts that name is a legal file name inside a directory and
// encodes key recoverably.
func checkLegal(t *testing.T, key, name string) {
	t.Helper()
	if len(name) > 143 || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || strings.HasPrefix(name, ".") {
		t.Fatalf("fileName(%q) = %q is not a safe file name", key, name)
	}
	dir := "/var/lock/x"
	if got := filepath.Dir(filepath.Join(dir, name)); got != dir {
		t.Fatalf("fileName(%q) = %q escapes its directory to %q", key, name, got)
	}
	base := strings.TrimSuffix(name, lockSuffix)
	if short, hash, cut := strings.Cut(base, "~"); cut {
		sum := sha256.Sum256([]byte(key))
		if hash != hex.EncodeToString(sum[:]) {
			t.Fatalf("fileName(%q) = %q: hash part is not the key's SHA-256", key, name)
		}
		if !strings.HasPrefix(escapeName(key), short) {
			t.Fatalf("fileName(%q) = %q: readable part is not a prefix of the escaped key", key, name)
		}
		return
	}
	if got, err := url.PathUnescape(base); err != nil || got != key {
		t.Fatalf("fileName(%q) = %q decodes to %q (%v)", key, name, got, err)
	}
	for i := 0; i < len(base); i++ {
		if base[i] == '%' {
			i += 2 // an escape; PathUnescape checked its digits
			continue
		}
		if !isPlain(base[i]) {
			t.Fatalf("fileName(%q) = %q has %q outside an escape", key, name, base[i])
		}
	}
}
