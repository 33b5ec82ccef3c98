package servertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/internal/testserver"
)

// quiet drops go-redis's own log lines: the dial failures these tests cause on purpose.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1              // a failed command must fail, not be retried
	opts.ContextTimeoutEnabled = true // honour ctx deadlines
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedis(t *testing.T) {
	url := testserver.Redis(t)
	if again := testserver.Redis(t); again != url {
		t.Fatalf("second call gave another server: %s then %s", url, again)
	}
	ctx := context.Background()
	c := redisClient(t, url)
	if err := c.Set(ctx, t.Name(), "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, t.Name()).Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
}

// TestStartRedis is the smoke test: start, use with go-redis, stop.
func TestStartRedis(t *testing.T) {
	begin := time.Now()
	s := testserver.StartRedis(t)
	t.Logf("redis-server answered %v after start", time.Since(begin).Round(time.Millisecond))
	ctx := context.Background()
	c := redisClient(t, s.URL())
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
}

func TestRedisRestart(t *testing.T) {
	s := testserver.StartRedis(t)
	url := s.URL()
	ctx := context.Background()
	c := redisClient(t, url)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if s.URL() != url {
		t.Fatalf("URL changed on restart: %s then %s", url, s.URL())
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("after Restart(true): GET = %q, %v; want v", got, err)
	}

	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after Restart(false): GET err = %v; want redis.Nil", err)
	}

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a killed Redis without persistence kept data: GET err = %v; want redis.Nil", err)
	}
}

func TestRedisPause(t *testing.T) {
	s := testserver.StartRedis(t)
	c := redisClient(t, s.URL())
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered while paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestRedisServers(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	ctx := context.Background()
	seen := map[string]bool{}
	for i, s := range servers {
		if seen[s.URL()] {
			t.Fatalf("two servers share %s", s.URL())
		}
		seen[s.URL()] = true
		c := redisClient(t, s.URL())
		if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
			t.Fatalf("server %d: DBSIZE = %d, %v; want an empty server", i, n, err)
		}
		if err := c.Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
