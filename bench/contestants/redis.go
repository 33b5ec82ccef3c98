package contestants

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/bench/harness"
)

// redisContestants are the single-server Redis contestants.
func redisContestants(url string, srv *harness.Server) []*harness.Contestant {
	return []*harness.Contestant{
		oursContestant(Redis, url, srv, true),
		oursWithoutFencing(url, srv),
		rawRedisContestant(url, srv),
		redisRWContestant(url, srv),
		redisSemContestant(url, srv),
		redislockContestant(url, srv, false),
		redislockContestant(url, srv, true),
		redsyncContestant(Redis, []string{url}, srv, false),
		redsyncContestant(Redis, []string{url}, srv, true),
	}
}

// oursWithoutFencing is our Redis driver with fencing=false (issue 23: the
// faster, weaker choice, without tokens), beside the default in every
// scenario but failover, where a leader's term is what it gives up.
func oursWithoutFencing(url string, srv *harness.Server) *harness.Contestant {
	c := oursContestant(Redis, withQuery(url, "fencing=false"), srv, true)
	c.Setting = noFenceSetting
	c.Elector = nil
	return c
}

// withQuery appends a query parameter to url.
func withQuery(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

// redlockContestants run Redlock over three independent servers: ours, then
// redsync at its default and tuned settings.
func redlockContestants(urls []string, srv *harness.Server) []*harness.Contestant {
	return []*harness.Contestant{
		oursContestant(Redlock, redlockURL(urls), srv, true),
		redsyncContestant(Redlock, urls, srv, false),
		redsyncContestant(Redlock, urls, srv, true),
	}
}

// redlockURL is our redlockdriver's URL for the servers. The servers' URLs
// hold no '&', '=', '+', '#' or '%', so they go into the query as they are.
func redlockURL(urls []string) string {
	q := make([]string, len(urls))
	for i, u := range urls {
		q[i] = "server=" + u
	}
	return "redlock://?" + strings.Join(q, "&")
}

// newRedisClient opens a go-redis client on url with go-redis's defaults.
func newRedisClient(url string) (*redis.Client, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(o), nil
}

// redisServer describes one or more Redis servers: their ports and the sum of
// their total_commands_processed.
func redisServer(urls ...string) (*harness.Server, error) {
	var addrs []string
	for _, u := range urls {
		h, err := hostOf(u)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, h)
	}
	ports, err := serverPorts(addrs...)
	if err != nil {
		return nil, err
	}
	return &harness.Server{Ports: ports, Requests: func(ctx context.Context) (int64, error) {
		var total int64
		for _, u := range urls {
			n, err := redisCommands(ctx, u)
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}}, nil
}

// redisCommands reads total_commands_processed from INFO stats, on a
// connection of its own so as not to count in the contestant's connections...
// it does count as one command, which the harness subtracts.
func redisCommands(ctx context.Context, url string) (int64, error) {
	c, err := newRedisClient(url)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}

// rawRedis is the floor: SET key owner NX PX ttl, and the standard
// compare-and-delete script (EVALSHA). One attempt, no waiting, no fencing.
type rawRedis struct{ c *redis.Client }

var compareAndDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func rawRedisContestant(url string, srv *harness.Server) *harness.Contestant {
	return &harness.Contestant{
		Backend: Redis, Name: floorName, Setting: "SET NX PX + compare-and-delete", Role: harness.Floor,
		TryUncontended: true, Server: srv,
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			c, err := newRedisClient(url)
			if err != nil {
				return nil, err
			}
			if err := compareAndDelete.Load(ctx, c).Err(); err != nil {
				c.Close()
				return nil, err
			}
			return rawRedis{c}, nil
		},
		NA: map[harness.Scenario]string{
			harness.Contended: "the floor makes one attempt; waiting is what a library adds",
			harness.Held:      "the floor has no refresh; see the libraries",
		},
	}
}

// Acquire is TryAcquire: the floor does not wait (it runs only on free keys).
func (r rawRedis) Acquire(ctx context.Context, key string) (harness.Release, error) {
	return r.TryAcquire(ctx, key)
}

func (r rawRedis) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	owner := nextOwner()
	ok, err := r.c.SetNX(ctx, key, owner, defaultTTL).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, harness.ErrBusy
	}
	return func(ctx context.Context) error {
		return compareAndDelete.Run(ctx, r.c, []string{key}, owner).Err()
	}, nil
}

func (r rawRedis) Close() error { return r.c.Close() }
