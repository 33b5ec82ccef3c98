package redisdriver

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/fence"
)

//go:embed fenced.lua
var fencedLua string

var fencedScript = redis.NewScript(fencedLua)

// Fenced makes a Redis server the fenced resource: its writes compare the
// writer's fencing token with the largest token admitted before for the key,
// and write or refuse in one script, so a holder that paused past its lock's
// TTL cannot overwrite what its successor wrote. A token at least as large as
// the key's is admitted (one holder writes many times with its token) and
// becomes the key's; a smaller one is refused with an error matching
// fence.ErrStale, and token 0 (a lock without fencing) with one matching
// fence.ErrZeroToken; a refused write changes nothing.
//
// The token lives in its own key, TokenKey(key), in the guarded key's Cluster
// slot, with no TTL: it must outlive the value (Del keeps it), or an old
// holder's write would be admitted again. Only writes through Fenced keep the
// guarantee; a plain SET of the key is not checked.
//
// Client is any go-redis client (not a pipeline: each call needs its reply;
// with ContextTimeoutEnabled, so that a call honours its context's deadline);
// the lock may live on another server or backend, since the token is the
// lock's and the check is the resource's.
type Fenced struct {
	Client redis.Cmdable
}

// Set sets key to value, as SET does (ttl 0: no expiry), if token is
// admitted.
func (f Fenced) Set(ctx context.Context, key string, value any, token uint64, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("redisdriver: fenced SET %q: %w: negative TTL %v", key, driver.ErrInvalidArgument, ttl)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1 // as go-redis's Set: a TTL below a millisecond is one, never none
	}
	return f.write(ctx, "SET", key, token, "set", value, ms)
}

// HSet sets the fields of the hash key, given as field, value pairs (as HSET
// does), if token is admitted.
func (f Fenced) HSet(ctx context.Context, key string, token uint64, fieldsAndValues ...any) error {
	if n := len(fieldsAndValues); n == 0 || n%2 != 0 {
		return fmt.Errorf("redisdriver: fenced HSET %q: %w: %d arguments, want field, value pairs", key, driver.ErrInvalidArgument, n)
	}
	return f.write(ctx, "HSET", key, token, append([]any{"hset"}, fieldsAndValues...)...)
}

// Del deletes key, if token is admitted. The key's token stays, so that no
// older holder can write the key again.
func (f Fenced) Del(ctx context.Context, key string, token uint64) error {
	return f.write(ctx, "DEL", key, token, "del")
}

// Token returns the largest token admitted for key, 0 if none was.
func (f Fenced) Token(ctx context.Context, key string) (uint64, error) {
	if f.Client == nil {
		return 0, fmt.Errorf("redisdriver: fencing token of %q: %w: Fenced has no Client", key, driver.ErrInvalidArgument)
	}
	tk, err := TokenKey(key)
	if err != nil {
		return 0, err
	}
	s, err := f.Client.Get(ctx, tk).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisdriver: fencing token of %q: %w", key, err)
	}
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redisdriver: fencing token of %q: the token key holds %q, not a token", key, s)
	}
	return tok, nil
}

// TokenKey is the key that holds key's fencing token: "{T}:fence:" + key,
// where T is the part of key that Redis Cluster hashes (its hash tag, or the
// whole key when it has none), so both are in one slot on a Cluster and a
// script may use both. A key that has a '}' but no hash tag ("a}b") has no
// such key (a hash tag cannot hold a '}'): it is an error matching
// driver.ErrInvalidArgument (lock.ErrInvalidArgument), as is the empty key.
func TokenKey(key string) (string, error) {
	tag, ok := clusterHashed(key)
	if !ok {
		if key == "" {
			return "", fmt.Errorf("redisdriver: fenced write: %w: empty key", driver.ErrInvalidArgument)
		}
		return "", fmt.Errorf("redisdriver: fenced write %q: %w: the key has a '}' but no hash tag, so no other key is sure to share its Cluster slot: give it a hash tag", key, driver.ErrInvalidArgument)
	}
	return "{" + tag + "}:fence:" + key, nil
}

// clusterHashed returns the part of key that Redis Cluster hashes to find its
// slot (the text between the first '{' and the first '}' after it, if not
// empty; else the whole key), and whether a hash tag can name it.
func clusterHashed(key string) (string, bool) {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e], true
		}
	}
	return key, key != "" && !strings.Contains(key, "}")
}

// write runs fenced.lua for the write args on key.
func (f Fenced) write(ctx context.Context, op, key string, token uint64, args ...any) error {
	if f.Client == nil {
		return fmt.Errorf("redisdriver: fenced %s %q: %w: Fenced has no Client", op, key, driver.ErrInvalidArgument)
	}
	if token == 0 {
		return fmt.Errorf("redisdriver: fenced %s %q: %w", op, key, fence.ErrZeroToken)
	}
	tk, err := TokenKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisdriver: fenced %s %q: %w", op, key, err)
	}
	tok := strconv.FormatUint(token, 10)
	res, err := fencedScript.Run(ctx, f.Client, []string{key, tk}, append([]any{tok}, args...)...).Slice()
	if err != nil {
		return fmt.Errorf("redisdriver: fenced %s %q: %w", op, key, err)
	}
	if len(res) == 1 && res[0] == int64(1) {
		return nil
	}
	if len(res) == 2 && res[0] == int64(0) {
		if s, ok := res[1].(string); ok {
			if held, err := strconv.ParseUint(s, 10, 64); err == nil {
				return fmt.Errorf("redisdriver: fenced %s: %w", op, &fence.StaleError{Resource: key, Token: token, Highest: held})
			}
		}
	}
	return fmt.Errorf("redisdriver: fenced %s %q: unexpected reply %v", op, key, res)
}
