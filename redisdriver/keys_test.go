package redisdriver

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/testserver"
)

// hashTag is the part of a key that decides its Redis Cluster slot: the text
// between the first '{' and the first '}' after it, if not empty; else the key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// keysWithPrefix is the key layout of a driver made WithPrefix(prefix).
func keysWithPrefix(prefix, key string) keys {
	var o options
	WithPrefix(prefix)(&o)
	return (&Driver{prefix: o.prefix}).keys(key)
}

var oddKeys = []string{
	"invoice:42", "{a}", "a{b}c", "}{", "{", "}", "{}", "%7B", "%", "a b", "a\nb", "\r\n\t",
	"ключ", "🔒", "e\u0301", "\x00", "{{{}}}", strings.Repeat("{", 1024),
}

func TestKeyLayout(t *testing.T) {
	k := keysWithPrefix("app{1}", "invoice:{42}")
	const l = "app%7B1%7D:{invoice:%7B42%7D}"
	want := keys{
		Lock:    l,
		Fence:   l + ":fence",
		Queue:   l + ":queue",
		Waiters: l + ":waiters",
		Holders: l + ":holders",
		Labels:  l + ":labels",
		Forced:  l + ":forced",
		Grant:   l + ":grant",
		Writers: l + ":writers",
		Watch:   l + ":watch",
	}
	if k != want {
		t.Fatalf("keys = %+v, want %+v", k, want)
	}
}

// The keys of a lock share one hash tag, the escaped user key, whatever
// braces the key or the prefix contain: a lock cannot straddle slots, and a
// key cannot choose its slot.
func TestBracesInKeysCannotMoveALockToAnotherSlot(t *testing.T) {
	for _, prefix := range []string{"distlock", "{x}", "a}b{c"} {
		for _, key := range oddKeys {
			k := keysWithPrefix(prefix, key)
			for _, name := range append(scriptKeysWithForced(k), k.Watch) {
				if tag := hashTag(name); tag != redislayout.Escape(key) {
					t.Errorf("prefix %q key %q: %q has hash tag %q, want %q", prefix, key, name, tag, redislayout.Escape(key))
				}
			}
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, k := range oddKeys {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		e := redislayout.Escape(key)
		if strings.ContainsAny(e, "{}") {
			t.Fatalf("redislayout.Escape(%q) = %q keeps a brace", key, e)
		}
		if redislayout.Unescape(e) != key {
			t.Fatalf("redislayout.Escape(%q) = %q does not unescape back", key, e)
		}
		if utf8.ValidString(key) && !utf8.ValidString(e) {
			t.Fatalf("redislayout.Escape(%q) = %q is not valid UTF-8", key, e)
		}
	})
}

// Odd keys lock as any other, and on the server their lock key is the
// documented name holding the plain owner.
func TestOddKeysAreStoredAsDocumented(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	prefix := "odd-" + randomHex(4)
	d, err := New(adminClient(t, url), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d)
	defer lk.Close()
	other := adminClient(t, url)
	for _, key := range oddKeys {
		if !utf8.ValidString(key) {
			continue
		}
		l, err := lk.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", key, err)
		}
		name := prefix + ":{" + redislayout.Escape(key) + "}"
		v, err := admin.Get(ctx, name).Result()
		if err != nil || !ownerID.MatchString(v) {
			t.Errorf("GET %q = %q, %v; want the owner id (25 to 40 hex digits)", name, v, err)
		}
		if ok, err := other.SetNX(ctx, name, "intruder", time.Minute).Result(); err != nil || ok {
			t.Errorf("SET NX on a held lock's key = %v, %v; want refused", ok, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
		if n, err := admin.Exists(ctx, name).Result(); err != nil || n != 0 {
			t.Errorf("lock key %q still there after Release (%v)", name, err)
		}
	}
}

// ownerID is the form driver.Request.Owner documents.
var ownerID = regexp.MustCompile(`^[0-9a-f]{25,40}$`)
