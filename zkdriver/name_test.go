package zkdriver_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

var keySeeds = []string{
	"", "/", "../x", "a/b", "a_b", "a:b", "a%2Fb", "a~b", "{t}", "\x00", "a\nb", ".", "..", ".x",
	"zookeeper", "Zookeeper", "zookeeper/x", "lock-", "_c_x-lock-0000000001", "ключ", "🔒", "e\u0301",
	"\uFFFE", "\u202E", strings.Repeat("é", lock.MaxKeyLen/2), strings.Repeat("x", lock.MaxKeyLen),
	strings.Repeat("%", 300), strings.Repeat("a", 200), strings.Repeat("a", 201),
}

// decode undoes the %XX escapes of an escaped name.
func decode(t *testing.T, name string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b.WriteByte(name[i])
			continue
		}
		if i+2 >= len(name) {
			t.Fatalf("name %q: truncated escape", name)
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil || strings.ToUpper(name[i+1:i+3]) != name[i+1:i+3] {
			t.Fatalf("name %q: bad escape %q", name, name[i:i+3])
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String()
}

// Every valid key maps to one legal znode name, and the key can be recovered
// from it (or, for long keys, its SHA-256 is in it): distinct keys never share
// a lock node.
func FuzzKeyMapsToOneLegalNodeNameInjectively(f *testing.F) {
	for _, s := range keySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if key == "" || len(key) > lock.MaxKeyLen || !utf8.ValidString(key) {
			return // the portable layer rejects these before any driver sees them
		}
		name := zkdriver.EscapeName(key)
		checkLegalName(t, name)
		if len(name) > 200 {
			t.Fatalf("name of %d bytes for a key of %d; want at most 200", len(name), len(key))
		}
		before, sum, cut := strings.Cut(name, "~")
		if !cut {
			if got := decode(t, name); got != key {
				t.Fatalf("name %q decodes to %q, not the key %q", name, got, key)
			}
			return
		}
		want := sha256.Sum256([]byte(key))
		if sum != hex.EncodeToString(want[:]) {
			t.Fatalf("long key's name %q does not end with the key's SHA-256", name)
		}
		if !strings.HasPrefix(key, decode(t, before)) {
			t.Fatalf("long key's name %q does not start with the key's escaped beginning", name)
		}
	})
}

// checkLegalName applies ZooKeeper's rules for one path component
// (PathUtils.validatePath) and the driver's own (printable ASCII only).
func checkLegalName(t *testing.T, name string) {
	t.Helper()
	switch name {
	case "", ".", "..", "zookeeper":
		t.Fatalf("name %q is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= 0x20 || c >= 0x7f || c == '/' {
			t.Fatalf("name %q has byte %#x", name, c)
		}
	}
}

func TestSequenceIsReadAfterTheLastLockMarker(t *testing.T) {
	for name, want := range map[string]int32{
		"_c_0d3a0a3e-4b3c-4e1a-9d4f-2b1c8e7f6a5b-lock-0000000007": 7,
		"_c_83d3a5fb7e1d4c9a8e2f6b1d0c9a8e7f-lock-0000000012":     12, // go-zookeeper's zk.Lock
		"lock-0000000003":           3, // Curator without protection
		"_c_x-lock-lock-0000000004": 4,
		"_c_x-lock--2147483648":     -2147483648, // after ZooKeeper's counter overflowed
		"_c_x-__WRIT__0000000001":   -1,          // Curator read-write lock: not a mutex node
		"something-else":            -1,
		"_c_x-lock-":                -1,
		"_c_x-lock-00000000x1":      -1,
	} {
		got, ok := zkdriver.Sequence(name)
		if want == -1 {
			if ok {
				t.Errorf("Sequence(%q) = %d, want none", name, got)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("Sequence(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
}

// The escaped names of awkward keys are accepted by a real server, one level
// below the prefix, and each is a distinct node.
func TestEscapedNamesAreAcceptedByZooKeeper(t *testing.T) {
	conn := zkConn(t, testserver.ZooKeeper(t))
	base := "/" + zkdriver.EscapeName(t.Name())
	if _, err := conn.Create(base, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, key := range keySeeds {
		if key == "" {
			continue
		}
		name := zkdriver.EscapeName(key)
		if other, dup := seen[name]; dup {
			t.Fatalf("keys %q and %q share the name %q", key, other, name)
		}
		seen[name] = key
		if _, err := conn.Create(base+"/"+name, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Errorf("key %q: creating node %q: %v", key, name, err)
		}
	}
	if got := children(t, conn, base); len(got) != len(seen) {
		t.Errorf("%d nodes under %s, want %d", len(got), base, len(seen))
	}
}

func TestPredecessorIsTheNextLowerSequenceAcrossTheCounterWrap(t *testing.T) {
	node := func(seq string) string { return "_c_m-lock-" + seq }
	cases := []struct {
		children []string
		ours     string
		want     string
	}{
		{[]string{node("0000000003"), node("0000000001"), node("0000000002")}, node("0000000003"), node("0000000002")},
		{[]string{node("0000000001"), node("0000000005")}, node("0000000001"), ""},
		{[]string{node("0000000001"), "foreign", node("0000000004")}, node("0000000004"), node("0000000001")},
		// ZooKeeper's counter wrapped between the second and third nodes.
		{[]string{node("-2147483648"), node("2147483646"), node("2147483647")}, node("-2147483648"), node("2147483647")},
		{[]string{node("2147483646"), node("-2147483648")}, node("2147483646"), ""},
	}
	for _, c := range cases {
		got, present := zkdriver.Predecessor(c.children, c.ours)
		if !present || got != c.want {
			t.Errorf("predecessor of %s in %v = %q, %v; want %q", c.ours, c.children, got, present, c.want)
		}
	}
	if _, present := zkdriver.Predecessor([]string{node("0000000001")}, node("0000000002")); present {
		t.Error("a node missing from the children was reported present")
	}
}

// The read-write queue: an exclusive node ("lock-" or Curator's "__WRIT__")
// waits for the node right before it, of any kind; a shared ("__READ__") node
// for the nearest exclusive node before it, and for no reader. So a reader
// behind a waiting writer waits, and readers before it do not.
func TestReadersWaitOnlyForTheNearestEarlierWriter(t *testing.T) {
	r := func(seq string) string { return "_c_r" + seq + "-__READ__" + seq }
	w := func(seq string) string { return "_c_w" + seq + "-__WRIT__" + seq }
	m := func(seq string) string { return "_c_m" + seq + "-lock-" + seq }
	queue := []string{r("0000000001"), w("0000000002"), r("0000000003"), m("0000000004"), r("0000000005"), r("0000000006"), "leases", "locks"}
	cases := []struct{ ours, want string }{
		{r("0000000001"), ""},              // first: holds
		{w("0000000002"), r("0000000001")}, // a writer waits for the reader before it
		{r("0000000003"), w("0000000002")}, // a reader behind a writer waits for it
		{m("0000000004"), r("0000000003")}, // the mutex's nodes are writers too
		{r("0000000005"), m("0000000004")}, // the nearest writer, not the first
		{r("0000000006"), m("0000000004")}, // readers never wait for readers
	}
	for _, c := range cases {
		got, present := zkdriver.Predecessor(queue, c.ours)
		if !present || got != c.want {
			t.Errorf("%s waits for %q (present %v); want %q", c.ours, got, present, c.want)
		}
	}
	readers := []string{r("0000000007"), r("0000000008"), r("0000000009")}
	for _, ours := range readers {
		if got, _ := zkdriver.Predecessor(readers, ours); got != "" {
			t.Errorf("reader %s waits for %s among readers only; want none", ours, got)
		}
	}
}
