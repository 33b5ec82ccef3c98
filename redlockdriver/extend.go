package redlockdriver

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Refresh without a script: a refresh batch none of whose grant records is
// due (nearly every one: a record comes due once in half of recordKeep) is
// sent to a server as one plain GETEX per lock in the worker's pipeline, and
// the worker compares each answer with the lock's owner, where a call of
// refreshbatch.lua ran the same GETEX from Lua. Measured over 100,000 locks
// in batches of 256 on one server alone on a core: 1.63 µs of server CPU a
// lock through the script, 1.00 µs as plain commands (the Lua call and the
// conversion of its arguments and answer, per lock, are gone), for 0.2 µs
// more on the client. The servers are what a Driver holding many locks runs
// out of first (see Capacity in docs/backends/redlock.md); the client has
// the cores.
//
// A job of opExtend has the lock keys as its keys, and as its arguments the
// TTL (a time.Duration), then the owner of each lock. Its answer is what
// refreshbatch.lua answers: per lock, refHeld where the key held the owner
// (and is now extended), refNotHeld where it held another owner, nothing, or
// a value of another type. Any other error (a server refusing GETEX, one
// loading its data) is the job's, as a script call's error is: it says
// nothing about the lock.

// queueExtend queues j's GETEX commands on pipe.
func queueExtend(ctx context.Context, pipe redis.Pipeliner, j job) []*redis.StringCmd {
	ttl := j.args[0].(time.Duration)
	cmds := make([]*redis.StringCmd, len(j.keys))
	for i, k := range j.keys {
		cmds[i] = pipe.GetEx(ctx, k, ttl)
	}
	return cmds
}

// extendAnswer reads the answers of j's GETEX commands as refreshbatch.lua's
// codes, or returns the first error that is not about a lock.
func extendAnswer(j job, cmds []*redis.StringCmd) (any, error) {
	out := make([]any, len(cmds))
	for i, c := range cmds {
		v, err := c.Result()
		switch {
		case err == nil:
			out[i] = int64(refNotHeld)
			if owner, _ := j.args[i+1].(string); v == owner {
				out[i] = int64(refHeld)
			}
		case err == redis.Nil || redis.HasErrorPrefix(err, "WRONGTYPE"):
			out[i] = int64(refNotHeld)
		default:
			return nil, err
		}
	}
	return out, nil
}
