package redislayout

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestEscapeLeavesNoBraceAndIsInjective(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "{a}": "%7Ba%7D", "%7B": "%257B", "é": "é"} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if got := Unescape(Escape(in)); got != in {
			t.Errorf("Unescape(Escape(%q)) = %q", in, got)
		}
	}
	if Escape("{") == Escape("%7B") {
		t.Error("Escape maps '{' and \"%7B\" to one name")
	}
}

func TestGlobEscapeMatchesItselfOnly(t *testing.T) {
	for in, want := range map[string]string{"a:b": "a:b", "a*b": `a\*b`, `[x]?\`: `\[x\]\?\\`, "é*": `é\*`} {
		if got := GlobEscape(in); got != want {
			t.Errorf("GlobEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUserKeyReadsOnlyLockKeysUnderThePrefix(t *testing.T) {
	for _, c := range []struct {
		name, userPrefix, want string
		ok                     bool
	}{
		{LockKey("p", "job:1"), "job:", "job:1", true},
		{LockKey("p", "a{b}%"), "a{", "a{b}%", true},
		{LockKey("p", "job:1"), "other", "job:1", false},
		{LockKey("p", "job:1") + Fence, "", "", false},
		{"q:{job:1}", "", "", false},
		{"p:{a{b}", "", "", false},
	} {
		got, ok := UserKey("p", c.name, c.userPrefix)
		if got != c.want || ok != c.ok {
			t.Errorf("UserKey(p, %q, %q) = %q, %v; want %q, %v", c.name, c.userPrefix, got, ok, c.want, c.ok)
		}
	}
	if got, want := ScanPattern("p*", "a{"), `p\*:{a%7B*}`; got != want {
		t.Errorf("ScanPattern = %q, want %q", got, want)
	}
}

func TestParseRecordReadsTokenSinceAndALabelWithSpaces(t *testing.T) {
	tok, us, label, ok := ParseRecord(`42 1700000000000000 {"a": "b c"}`)
	if !ok || tok != 42 || us != 1700000000000000 || label != `{"a": "b c"}` {
		t.Errorf("ParseRecord = %d, %d, %q, %v", tok, us, label, ok)
	}
	if _, _, label, ok := ParseRecord("0 0 "); !ok || label != "" {
		t.Errorf("an empty label: %q, %v", label, ok)
	}
	for _, bad := range []string{"", "42", "42 7", "x 7 l", "42 y l", "-1 7 l"} {
		if _, _, _, ok := ParseRecord(bad); ok {
			t.Errorf("ParseRecord(%q) accepted it", bad)
		}
	}
}

func TestParseRunIDFindsTheServersRunID(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:1d3f0c\r\ntcp_port:6379\r\n"
	if id, ok := ParseRunID(info); !ok || id != "1d3f0c" {
		t.Errorf("ParseRunID = %q, %v; want 1d3f0c", id, ok)
	}
	for _, bad := range []string{"", "# Server\r\nrun_id:\r\n", "redis_version:7.0.15"} {
		if id, ok := ParseRunID(bad); ok {
			t.Errorf("ParseRunID(%q) = %q, want none", bad, id)
		}
	}
}

func TestPauseEndsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Pause(ctx, time.Hour) {
		t.Error("Pause of a hour with an ended context reported true")
	}
	if !Pause(context.Background(), time.Microsecond) {
		t.Error("Pause with a live context reported false")
	}
}

func TestNewInboxIsAFreshChannelUnderThePrefix(t *testing.T) {
	a, b := NewInbox("p"), NewInbox("p")
	if a == b || len(a) != len("p:inbox:")+24 || a[:len("p:inbox:")] != "p:inbox:" {
		t.Errorf("NewInbox gave %q and %q, want two distinct p:inbox:<24 hex digits>", a, b)
	}
}

func TestNewKeysShareTheLocksHashTag(t *testing.T) {
	k := NewKeys("p", "a{b}")
	if k.Lock != LockKey("p", "a{b}") || k.Lock != "p:{a%7Bb%7D}" {
		t.Errorf("lock key %q", k.Lock)
	}
	for name, got := range map[string]string{Fence: k.Fence, Queue: k.Queue, Waiters: k.Waiters, Holders: k.Holders,
		Labels: k.Labels, Forced: k.Forced, Grant: k.Grant, Writers: k.Writers, Watch: k.Watch} {
		if got != k.Lock+name {
			t.Errorf("key %s is %q, want %q", name, got, k.Lock+name)
		}
	}
}
