package redisdriver

import (
	"context"
	_ "embed"
	"strconv"
	"strings"

	"github.com/distlock/lock/internal/redisproto"
	"github.com/redis/go-redis/v9"
)

// The Lua scripts beside this file. redis.Script sends EVALSHA and falls back to
// EVAL when the server answers NOSCRIPT (a restarted or failed-over server, or
// SCRIPT FLUSH), so each script crosses the network once per server.
var (
	//go:embed common.lua
	commonLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed plain.lua
	plainLua string
	//go:embed release.lua
	releaseLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed shaped.lua
	shapedLua string
	//go:embed shapedrelease.lua
	shapedReleaseLua string
	//go:embed shapedrefresh.lua
	shapedRefreshLua string
	//go:embed force.lua
	forceLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed relabel.lua
	relabelLua string
	//go:embed watch.lua
	watchLua string

	acquireScript = redis.NewScript(withCommon(acquireLua))
	// Without fencing (WithFencing(false)): plain.lua's fast path, then
	// acquire.lua's slow path; TryAcquire first sends a plain SET NX PX
	// (see tryPlain).
	plainScript   = redis.NewScript(withCommon(plainLua + "\n--@common\n" + afterCommon(acquireLua)))
	releaseScript = redis.NewScript(withCommon(releaseLua))
	refreshScript = redis.NewScript(refreshLua)

	// Shared holds and permits (see Read-write locks and semaphores in the
	// package documentation), apart so that the mutex's scripts stay as short.
	shapedScript        = redis.NewScript(withCommon(shapedLua))
	shapedReleaseScript = redis.NewScript(withCommon(shapedReleaseLua))
	shapedRefreshScript = redis.NewScript(shapedRefreshLua)

	// Inspection and operators' calls (see Inspection, eviction and leader
	// election in the package documentation).
	forceScript   = redis.NewScript(withCommon(forceLua))
	inspectScript = redis.NewScript(withCommon(inspectLua))
	relabelScript = redis.NewScript(withCommon(relabelLua))
	watchScript   = redis.NewScript(watchLua)
)

// withCommon puts common.lua in place of the script's "--@common" line, after
// its fast path.
// FENCE_KEEP, in either, is fenceKeep in milliseconds.
func withCommon(src string) string {
	if !strings.Contains(src, "\n--@common\n") {
		panic("redisdriver: script without --@common")
	}
	return withKeep(strings.Replace(src, "\n--@common\n", "\n"+commonLua+"\n", 1))
}

// afterCommon is the part of a script after its "--@common" line: its slow
// path.
func afterCommon(src string) string {
	_, after, ok := strings.Cut(src, "\n--@common\n")
	if !ok {
		panic("redisdriver: script without --@common")
	}
	return after
}

// withKeep puts fenceKeep in milliseconds in place of FENCE_KEEP.
func withKeep(src string) string {
	return strings.ReplaceAll(src, "FENCE_KEEP", strconv.FormatInt(millis(fenceKeep), 10))
}

// Results of acquire.lua.
const (
	acqTaken     = 1  // token, or {1, token}
	acqHeld      = 2  // {2, token, pttl}: already ours
	acqBusy      = 0  // {0, wait ms}
	acqWrongType = -1 // the lock key is not a string
	acqForeign   = -3 // {-3, n}: KEYS[n] has the wrong type
	acqMismatch  = -4 // the key is in use with another shape or number of permits
)

var isNoScript = redisproto.IsNoScript

// evalPipelined runs scripts[i] once per (keys, args) call in one pipeline, and
// again with EVAL, in a second pipeline, for the calls the server answered
// NOSCRIPT. extra, if set, adds commands after the scripts in each pipeline; it
// returns them so the caller can read them after the last round.
func evalPipelined(ctx context.Context, c redis.UniversalClient, scripts []*redis.Script, keys [][]string, args [][]any, extra func(redis.Pipeliner)) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(keys))
	pipe := c.Pipeline()
	for i := range keys {
		cmds[i] = scripts[i].EvalSha(ctx, pipe, keys[i], args[i]...)
	}
	if extra != nil {
		extra(pipe)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	pipe = c.Pipeline()
	for _, i := range again {
		cmds[i] = scripts[i].Eval(ctx, pipe, keys[i], args[i]...)
	}
	if extra != nil {
		extra(pipe)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// hotKeys is how many keys (KEYS) a hotCall passes: keys.all's.
const hotKeys = 6

// A hotCall is the arguments of one call of acquire.lua (plain.lua without
// fencing) or release.lua, the scripts every lock's uncontended path runs,
// built in one allocation: go-redis writes a *string or *int64 argument as
// the value it points to, so arguments that point into the call's own
// fields need no allocation each, where redis.Script.Run boxes every key and
// argument apart and copies them into a slice of its own.
type hotCall struct {
	k                        keys
	sha, owner, label, inbox string
	ttl, lease               int64
	args                     [3 + hotKeys + 5]any // EVALSHA, its SHA1, the number of keys, the keys, the arguments
	n                        int                  // args in use
}

// newHotCall starts a call of s on the keys k; add appends its arguments.
func newHotCall(s *redis.Script, k keys) *hotCall {
	c := &hotCall{k: k, sha: s.Hash()}
	c.args = [len(c.args)]any{"evalsha", &c.sha, hotKeys, &c.k.Lock, &c.k.Fence, &c.k.Queue, &c.k.Waiters, &c.k.Holders, &c.k.Labels}
	c.n = 3 + hotKeys
	return c
}

// add appends an argument (ARGV): a pointer to one of c's fields, or a
// constant (whose boxing allocates nothing).
func (c *hotCall) add(arg any) { c.args[c.n] = arg; c.n++ }

// run sends the call to s by EVALSHA, and again by EVAL if the server does
// not have the script (NOSCRIPT: a restarted or failed-over server, or SCRIPT
// FLUSH), as redis.Script.Run does.
func (c *hotCall) run(ctx context.Context, client redis.UniversalClient, s *redis.Script) *redis.Cmd {
	cmd := redis.NewCmd(ctx, c.args[:c.n]...)
	cmd.SetFirstKeyPos(3)        // routes it by its first key in a Cluster, as EvalSha does
	_ = client.Process(ctx, cmd) // the error is cmd's
	if isNoScript(cmd.Err()) {
		return s.Eval(ctx, client, scriptKeys(c.k), c.args[3+hotKeys:c.n]...)
	}
	return cmd
}
