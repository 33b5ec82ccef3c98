package redisdriver

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
	"github.com/distlock/lock/internal/redisproto"
	"github.com/distlock/lock/internal/staleholder"
	"github.com/distlock/lock/internal/testserver"
)

func fencedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fencedKey is a key of its own for t on a shared server.
func fencedKey(t *testing.T) string { return "fenced:" + t.Name() + ":" + randomHex(4) }

// wantStale fails t unless err is a refusal by the token by.
func wantStale(t *testing.T, err error, by uint64) {
	t.Helper()
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) || se.Highest != by {
		t.Fatalf("err = %v, want a refusal matching fence.ErrStale by token %d", err, by)
	}
}

func wantToken(t *testing.T, ctx context.Context, f Fenced, key string, want uint64) {
	t.Helper()
	if got, err := f.Token(ctx, key); err != nil || got != want {
		t.Fatalf("Token(%q) = %d, %v; want %d", key, got, err, want)
	}
}

func wantValue(t *testing.T, ctx context.Context, c redis.Cmdable, key, want string) {
	t.Helper()
	got, err := c.Get(ctx, key).Result()
	if err != nil || got != want {
		t.Fatalf("GET %q = %q, %v; want %q", key, got, err, want)
	}
}

func TestFencedSetAdmitsEqualAndLargerTokensAndRefusesSmallerOnes(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)

	if err := f.Set(ctx, key, "a", 5, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, key, "b", 5, 0); err != nil {
		t.Fatalf("the same holder's second write with its token: %v", err)
	}
	wantValue(t, ctx, c, key, "b")
	wantStale(t, f.Set(ctx, key, "old", 4, 0), 5)
	wantValue(t, ctx, c, key, "b")
	if err := f.Set(ctx, key, "c", 9, 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, key, "old", 8, 0), 9)
	wantValue(t, ctx, c, key, "c")
	wantToken(t, ctx, f, key, 9)
}

func TestFencedSetKeepsItsTTL(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)
	if err := f.Set(ctx, key, "v", 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("PTTL after a fenced SET with a TTL of 1m = %v", ttl)
	}
	tk, _ := TokenKey(key)
	if ttl := c.PTTL(ctx, tk).Val(); ttl != -1 {
		t.Fatalf("PTTL of the token key = %v, want none (-1): the token must outlive the value", ttl)
	}
	if err := f.Set(ctx, key, "w", 3, 0); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl != -1 {
		t.Fatalf("PTTL after a fenced SET without a TTL = %v, want none (-1), as SET", ttl)
	}
}

func TestFencedHSetWritesFieldsOnlyForACurrentToken(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)
	if err := f.HSet(ctx, key, 7, "state", "paid", "by", "holder-7"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.HSet(ctx, key, 6, "state", "refunded"), 7)
	if err := f.HSet(ctx, key, 7, "note", "second write"); err != nil {
		t.Fatal(err)
	}
	got := c.HGetAll(ctx, key).Val()
	want := map[string]string{"state": "paid", "by": "holder-7", "note": "second write"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("HGETALL = %v, want %v", got, want)
	}
}

// A deleted key keeps its token: an older holder cannot write it again.
func TestFencedDelKeepsTheTokenSoOlderHoldersStayRefused(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)
	if err := f.Set(ctx, key, "v", 4, 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Del(ctx, key, 3), 4)
	wantValue(t, ctx, c, key, "v")
	if err := f.Del(ctx, key, 6); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the key exists after an admitted fenced DEL")
	}
	wantToken(t, ctx, f, key, 6)
	wantStale(t, f.Set(ctx, key, "old", 5, 0), 6)
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("a refused SET after the DEL wrote the key")
	}
}

// Tokens are compared exactly over the whole uint64 range: 2^60 and 2^60+1
// are one double in Lua's numbers.
func TestFencedWriteComparesTokensAbove2To53Exactly(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)
	const big = uint64(1) << 60
	if err := f.Set(ctx, key, "new", big+1, 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, key, "old", big, 0), big+1)
	if err := f.Set(ctx, key, "max", ^uint64(0), 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, key, "old", big+1, 0), ^uint64(0))
	wantValue(t, ctx, c, key, "max")
	// A shorter decimal is a smaller token whatever its digits.
	key2 := fencedKey(t)
	if err := f.Set(ctx, key2, "10", 10, 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, key2, "9", 9, 0), 10)
}

func TestFencedWriteRefusesBadArgumentsAndChangesNothing(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)
	tk, _ := TokenKey(key)
	cases := []struct {
		name string
		err  error
		is   error
	}{
		{"SET with token 0", f.Set(ctx, key, "v", 0, 0), fence.ErrZeroToken},
		{"HSET with token 0", f.HSet(ctx, key, 0, "f", "v"), fence.ErrZeroToken},
		{"DEL with token 0", f.Del(ctx, key, 0), fence.ErrZeroToken},
		{"negative TTL", f.Set(ctx, key, "v", 1, -time.Second), lock.ErrInvalidArgument},
		{"HSET without fields", f.HSet(ctx, key, 1), lock.ErrInvalidArgument},
		{"HSET with a field and no value", f.HSet(ctx, key, 1, "f"), lock.ErrInvalidArgument},
		{"a key with '}' and no hash tag", f.Set(ctx, key+"}", "v", 1, 0), lock.ErrInvalidArgument},
		{"the empty key", f.Set(ctx, "", "v", 1, 0), lock.ErrInvalidArgument},
		{"no Client", Fenced{}.Set(ctx, key, "v", 1, 0), lock.ErrInvalidArgument},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.is) || !errors.Is(tc.err, lock.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want %v (and lock.ErrInvalidArgument)", tc.name, tc.err, tc.is)
		}
	}
	if n := c.Exists(ctx, key, tk, key+"}", "").Val(); n != 0 {
		t.Fatalf("refused calls wrote %d keys", n)
	}
}

func TestFencedWriteHonoursItsContext(t *testing.T) {
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Set(ctx, key, "v", 1, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Set with a cancelled context: %v, want context.Canceled", err)
	}
	if n := c.Exists(fencedCtx(t), key).Val(); n != 0 {
		t.Fatalf("a Set with a cancelled context wrote the key")
	}
}

// A write the server refuses (HSET of a string) changes nothing: not the
// value, not the token.
func TestFencedWriteThatFailsLeavesTheTokenAsItWas(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	f := Fenced{Client: c}
	key := fencedKey(t)
	if err := f.Set(ctx, key, "string", 2, 0); err != nil {
		t.Fatal(err)
	}
	err := f.HSet(ctx, key, 3, "f", "v")
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || errors.Is(err, fence.ErrStale) {
		t.Fatalf("HSET of a string key = %v, want the server's WRONGTYPE", err)
	}
	wantToken(t, ctx, f, key, 2)
	wantValue(t, ctx, c, key, "string")
}

func TestTokenKeySharesTheKeysClusterSlot(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"invoice:42", "{invoice:42}:fence:invoice:42"},
		{"{user:1}:balance", "{user:1}:fence:{user:1}:balance"},
		{"a{b", "{a{b}:fence:a{b"},
		{"{}x", ""}, // an empty tag: the whole key is hashed, and it holds a '}'
		{"a}b", ""},
	} {
		got, err := TokenKey(tc.key)
		if tc.want == "" {
			if !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("TokenKey(%q) = %q, %v; want ErrInvalidArgument", tc.key, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("TokenKey(%q) = %q, %v; want %q", tc.key, got, err, tc.want)
		}
		if redisproto.Slot(got) != redisproto.Slot(tc.key) {
			t.Errorf("TokenKey(%q) = %q is in slot %d, the key in %d", tc.key, got, redisproto.Slot(got), redisproto.Slot(tc.key))
		}
	}
}

// interleavedFencedWrites runs fenceprops.ConcurrentWriters on key through
// f with the write op ("set", "hset", or "del" for the final write and every
// third one, the others SET) and checks that the key ends in the final
// write's state.
func interleavedFencedWrites(t *testing.T, ctx context.Context, f Fenced, c redis.Cmdable, key, op string) {
	read := func(ctx context.Context) (string, error) {
		var v string
		var err error
		if op == "hset" {
			v, err = c.HGet(ctx, key, "value").Result()
		} else {
			v, err = c.Get(ctx, key).Result()
		}
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		return v, err
	}
	final, err := fenceprops.ConcurrentWriters(ctx, fenceprops.Store{
		Write: func(ctx context.Context, a fenceprops.Attempt) error {
			switch {
			case a.Delete:
				return f.Del(ctx, key, a.Token)
			case op == "hset":
				return f.HSet(ctx, key, a.Token, "value", a.Value, "token", a.Token)
			}
			return f.Set(ctx, key, a.Value, a.Token, 0)
		},
		Read:    read,
		Deletes: op == "del",
		RefusedBy: func(err error) (uint64, bool) {
			var se *fence.StaleError
			if errors.As(err, &se) {
				return se.Highest, true
			}
			return 0, false
		},
	}, 8, 30)
	if err != nil {
		t.Error(err)
	}
	switch {
	case final.Delete:
		if n := c.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("the key exists after the largest token's DEL")
		}
	case op == "hset":
		got := c.HGetAll(ctx, key).Val()
		if got["value"] != final.Value || got["token"] != strconv.FormatUint(final.Token, 10) || len(got) != 2 {
			t.Errorf("HGETALL = %v, want the largest token's write %q", got, final.Value)
		}
	}
	if got, err := f.Token(ctx, key); err != nil || got != final.Token {
		t.Errorf("Token = %d, %v; want %d", got, err, final.Token)
	}
}

func TestFencedWritesOfInterleavedTokensEndInTheLargestTokensWrite(t *testing.T) {
	ctx := fencedCtx(t)
	c := adminClient(t, testserver.Redis(t))
	for _, op := range []string{"set", "hset", "del"} {
		t.Run(op, func(t *testing.T) {
			interleavedFencedWrites(t, ctx, Fenced{Client: c}, c, fencedKey(t), op)
		})
	}
}

// On a Cluster, keys with and without a hash tag, on several nodes: the
// script's two keys share a slot (a CROSSSLOT error otherwise).
func TestFencedWritesOfInterleavedTokensOnACluster(t *testing.T) {
	cl := startCluster(t)
	ctx := fencedCtx(t)
	var addrs []string
	for _, n := range cl.nodes {
		addrs = append(addrs, n.Options().Addr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	f := Fenced{Client: c}
	for _, op := range []string{"set", "hset", "del"} {
		for i, key := range []string{"invoice:1", "invoice:2", "{user:7}:balance", "a{b"} {
			t.Run(fmt.Sprintf("%s/%d", op, i), func(t *testing.T) {
				interleavedFencedWrites(t, ctx, f, c, key+":"+op, op)
			})
		}
	}
	slots := map[int64]bool{}
	for _, key := range []string{"invoice:1:set", "invoice:2:set", "{user:7}:balance:set"} {
		slots[c.ClusterKeySlot(ctx, key).Val()] = true
	}
	if len(slots) < 2 {
		t.Fatalf("the keys are all in one slot: the test covers no second node")
	}
}

// The child's side of the paused-holder test: resource is "URL KEY", URL a
// redis:// or redis+cluster:// one.
func staleHolderWrite(ctx context.Context, resource string, token uint64, value string) error {
	raw, key, _ := strings.Cut(resource, " ")
	var c redis.UniversalClient
	if strings.HasPrefix(raw, "redis+cluster://") {
		u, err := neturl.Parse(raw)
		if err != nil {
			return err
		}
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: append([]string{u.Host}, u.Query()["addr"]...)})
	} else {
		o, err := redis.ParseURL(raw)
		if err != nil {
			return err
		}
		c = redis.NewClient(o)
	}
	defer c.Close()
	return Fenced{Client: c}.Set(ctx, key, value, token, 0)
}

// Kleppmann's scenario: a holder process takes the lock and writes, is
// frozen past its TTL, a second holder takes the lock and writes with its
// larger token; the first resumes and writes with its old token: refused,
// and the value stays the second holder's. On one server, and on a Cluster
// (lock and value both on it).
func TestPausedHolderWriteIsRefusedAfterItsSuccessorWrote(t *testing.T) {
	for _, where := range []string{"server", "cluster"} {
		t.Run(where, func(t *testing.T) {
			var url string
			var c redis.UniversalClient
			if where == "server" {
				url = testserver.Redis(t)
				c = adminClient(t, url)
			} else {
				cl := startCluster(t)
				var addrs []string
				for _, n := range cl.nodes {
					addrs = append(addrs, n.Options().Addr)
				}
				url = cl.url
				c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
				defer c.Close()
			}
			pausedHolderRefused(t, url, c)
		})
	}
}

func pausedHolderRefused(t *testing.T, url string, c redis.UniversalClient) {
	ctx := fencedCtx(t)
	key, resource := fencedKey(t), fencedKey(t)
	const ttl = time.Second
	first := staleholder.Start(t, staleholder.Spec{URL: url, Key: key, TTL: ttl, Resource: url + " " + resource, First: "holder 1, before its pause"})
	wantValue(t, ctx, c, resource, "holder 1, before its pause")
	first.Freeze(t)

	lk, err := lock.Open(ctx, url, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, key) // once the frozen holder's lock expired
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= first.Token {
		t.Fatalf("the second holder's token %d is not above the first's %d", l.Token(), first.Token)
	}
	f := Fenced{Client: c}
	if err := f.Set(ctx, resource, "holder 2", l.Token(), 0); err != nil {
		t.Fatal(err)
	}
	if got := first.Write(t, "holder 1, after its pause"); got != staleholder.Stale {
		t.Fatalf("the paused holder's late write: %s, want %s", got, staleholder.Stale)
	}
	wantValue(t, ctx, c, resource, "holder 2")
	wantToken(t, ctx, f, resource, l.Token())
}
