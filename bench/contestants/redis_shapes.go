package contestants

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/bench/harness"
)

// There is no Go library with a Redis read-write lock or semaphore that users
// pick the way they pick redsync or bsm/redislock (Redisson's RReadWriteLock
// and RSemaphore are Java), so Redis's shapes are compared with raw recipes
// from well-known sources, written here, each polled with a 1 ms retry delay
// (the recipes have no wake-up).

// retryDelay is how long the polling recipes wait between attempts: the tuned
// setting of the polling mutex libraries.
const retryDelay = time.Millisecond

// poll calls try until it takes the lock (true), fails, or ctx is done,
// waiting retryDelay between attempts.
func poll(ctx context.Context, try func() (bool, error)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		ok, err := try()
		if err != nil || ok {
			return err
		}
		t.Reset(retryDelay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// The read-write floor is Redisson's RReadWriteLock layout reduced to its
// core: one hash per lock, a "mode" field (read or write) and a field per
// holder, the whole hash expiring after the TTL. Unlike Redisson it has no
// reentrancy, no per-reader expiry and no pub/sub wake-up, and like Redisson's
// read lock it lets a reader in whenever the mode is read, so it has no writer
// preference: writers can wait behind a stream of readers.
var (
	rwReadScript = redis.NewScript(`
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false or mode == 'read' then
  redis.call('HSET', KEYS[1], 'mode', 'read', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0`)
	rwWriteScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0`)
	// The last holder out (only "mode" left) deletes the hash.
	rwReleaseScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 and redis.call('HLEN', KEYS[1]) <= 1 then
  redis.call('DEL', KEYS[1])
end
return 1`)
)

// The semaphore floor is the fair semaphore of "Redis in Action" (Carlson,
// section 6.3.2): a sorted set of holders by time (expired ones trimmed), a
// sorted set of holders by a counter (ZINTERSTORE drops the expired), and the
// counter; a caller holds a permit when its counter ranks below the limit.
// The book sends these commands in two MULTI pipelines, which lets limit+1 in
// when two callers interleave (the book's own fix, in 6.3.5, is a lock around
// them); here they run as one script, atomically, with the server's clock.
var (
	semAcquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('ZINTERSTORE', KEYS[2], 2, KEYS[2], KEYS[1], 'WEIGHTS', 1, 0)
local counter = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('ZADD', KEYS[2], counter, ARGV[3])
if redis.call('ZRANK', KEYS[2], ARGV[3]) < tonumber(ARGV[1]) then
  return 1
end
redis.call('ZREM', KEYS[1], ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[3])
return 0`)
	semReleaseScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1`)
)

// redisRecipe is a client of the raw Redis read-write and semaphore recipes.
type redisRecipe struct {
	noTry
	c   *redis.Client
	ttl time.Duration
}

func openRedisRecipe(url string, scripts ...*redis.Script) func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
	return func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
		c, err := newRedisClient(url)
		if err != nil {
			return nil, err
		}
		for _, s := range scripts {
			if err := s.Load(ctx, c).Err(); err != nil {
				c.Close()
				return nil, err
			}
		}
		return &redisRecipe{c: c, ttl: ttlOr(ttl, defaultTTL)}, nil
	}
}

func redisRWContestant(url string, srv *harness.Server) *harness.Contestant {
	na := shapeOnlyNA("a read-write recipe only")
	na[harness.Semaphore] = "a read-write recipe; the semaphore recipe is a row of its own"
	return &harness.Contestant{
		Backend: Redis, Name: "raw read-write", Setting: "Redisson's hash layout, 1 ms retry", Role: harness.Floor,
		Server: srv, NA: na,
		Open: openRedisRecipe(url, rwReadScript, rwWriteScript, rwReleaseScript),
	}
}

func redisSemContestant(url string, srv *harness.Server) *harness.Contestant {
	na := shapeOnlyNA("a semaphore recipe only")
	na[harness.ReadHeavy] = "a semaphore recipe; the read-write recipe is a row of its own"
	return &harness.Contestant{
		Backend: Redis, Name: "raw semaphore", Setting: "Redis in Action 6.3.2, one script, 1 ms retry", Role: harness.Floor,
		Server: srv, NA: na,
		Open: openRedisRecipe(url, semAcquireScript, semReleaseScript),
	}
}

func (r *redisRecipe) Acquire(context.Context, string) (harness.Release, error) {
	return nil, fmt.Errorf("%w: a recipe of one shape", harness.ErrUnsupported)
}

func (r *redisRecipe) AcquireRW(ctx context.Context, key string, shared bool) (harness.Release, error) {
	k, owner := "bench-rw:"+key, nextOwner()
	script := rwWriteScript
	if shared {
		script = rwReadScript
	}
	err := poll(ctx, func() (bool, error) {
		n, err := script.Run(ctx, r.c, []string{k}, r.ttl.Milliseconds(), owner).Int()
		return n == 1, err
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return rwReleaseScript.Run(ctx, r.c, []string{k}, owner).Err()
	}, nil
}

func (r *redisRecipe) AcquirePermit(ctx context.Context, key string, permits int) (harness.Release, error) {
	// One hash tag: the three keys stay in one slot, as a script needs on a
	// cluster.
	keys := []string{"{bench-sem:" + key + "}", "{bench-sem:" + key + "}:owner", "{bench-sem:" + key + "}:counter"}
	owner := nextOwner()
	err := poll(ctx, func() (bool, error) {
		n, err := semAcquireScript.Run(ctx, r.c, keys, permits, r.ttl.Seconds(), owner).Int()
		return n == 1, err
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return semReleaseScript.Run(ctx, r.c, keys[:2], owner).Err()
	}, nil
}

func (r *redisRecipe) Close() error { return r.c.Close() }
