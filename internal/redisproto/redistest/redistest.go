// Package redistest holds what the tests of the Redis drivers (redisdriver
// and redlockdriver) share about a server and a refresh batch.
//
// It is imported by test code only. It lives in the redisproto module, which
// both drivers already require and which already requires go-redis, so it
// adds no module to either driver's graph, and nothing to what an importer of
// the drivers builds.
package redistest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
)

// ServerCalls reads what a server counted since its last CONFIG RESETSTAT,
// from INFO commandstats: every command (those scripts run included, and the
// CONFIG RESETSTAT itself) but PING and, of those, the EVALSHA calls. PINGs
// are left out because clients send them on their own schedule (a driver's
// idle pub/sub connection after 15 s of silence), so one may fall between a
// test's reset of the counts and its reading of them.
func ServerCalls(ctx context.Context, c *redis.Client) (all, evalsha int64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if name == "cmdstat_ping" {
			continue
		}
		all += n
		if name == "cmdstat_evalsha" {
			evalsha += n
		}
	}
	return all, evalsha, nil
}

// CheckRefreshAnswers fails t for each answer of a refresh batch that is not
// the one lost names: errs[i] must be nil (still held) for a lock i that lost
// leaves out, and both driver.ErrNotHeld and the cause lost[i] otherwise.
func CheckRefreshAnswers(t testing.TB, errs []error, lost map[int]error) {
	t.Helper()
	for i, err := range errs {
		want := lost[i]
		switch {
		case want == nil && err != nil:
			t.Errorf("lock %d: %v, want held", i, err)
		case want != nil && (!errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, want)):
			t.Errorf("lock %d: %v, want ErrNotHeld and %v", i, err, want)
		}
	}
}
