package redisdriver

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
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
	//go:embed set.lua
	setLua string

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

	// A set of locks taken at once (see sets.go).
	setScript = redis.NewScript(withCommon(setLua))

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

// A scriptCall is one call of a script: its KEYS and ARGV.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// evalPipelined runs the calls in one pipeline, and again with EVAL, in a
// second pipeline, those the server answered NOSCRIPT. extra, if set, adds
// commands after the scripts in each pipeline; it returns them so the caller
// can read them after the last round.
func evalPipelined(ctx context.Context, c redis.UniversalClient, calls []scriptCall, extra func(redis.Pipeliner)) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, call := range calls {
		cmds[i] = call.script.EvalSha(ctx, pipe, call.keys, call.args...)
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
		cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	if extra != nil {
		extra(pipe)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// hotKeys is how many keys (KEYS) a hotCall passes: scriptKeys'.
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

// keys are the names of a lock's keys, laid out as internal/redislayout says:
// this driver uses the lock key, fence, queue, waiters, holders, labels,
// forced and the watch channel. The fence record holds the last token alone,
// or after an exclusive grant "token since-µs owner label": the exclusive
// holder's record.
type keys = redislayout.Keys

func (d *Driver) keys(key string) keys { return redislayout.NewKeys(d.prefix, key) }

// scriptKeys is the keys of the scripts that grant and release, in the order
// of their KEYS (see common.lua). It leaves out forced, which only the
// scripts that evict, relabel and refresh read: every key costs the hot path.
func scriptKeys(k keys) []string {
	return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Holders, k.Labels}
}

// scriptKeysWithForced is scriptKeys and forced, the KEYS of force.lua and
// relabel.lua.
func scriptKeysWithForced(k keys) []string {
	return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Holders, k.Labels, k.Forced}
}

// shape is what the scripts call n: 0 for a shared hold, the number of
// permits for a permit, -1 for the exclusive lock.
func shape(req *driver.Request) int {
	switch {
	case req.Permits > 1:
		return req.Permits
	case req.Shared:
		return 0
	}
	return -1
}

// go-redis retries a command whose reply timed out (MaxRetries, 3 by
// default) on another connection, and against a server that accepts
// connections but answers nothing (frozen, overloaded) the new connection's
// handshake waits its own read timeout too: one TryAcquire with a context
// without deadline took two read timeouts and the backoff between them
// (10.3s with go-redis's default of 5s), where one was documented. So the
// driver bounds each TryAcquire, Refresh and Release by the client's read
// timeout, retries included: a retry that fits (a connection reset, answered
// at once on a new connection) still happens, a second wait for silence does
// not.

// attemptTimeout is the read timeout of client after go-redis's defaults,
// which bounds one call; zero when reads are not bounded (read_timeout=-1 or
// -2), and the call is then bounded by its context alone.
func attemptTimeout(client redis.UniversalClient) time.Duration {
	var t time.Duration
	switch c := client.(type) {
	case *redis.Client:
		t = c.Options().ReadTimeout
	case *redis.ClusterClient:
		t = c.Options().ReadTimeout
	}
	return max(t, 0)
}

// attempt returns ctx bounded by the driver's attempt timeout, and a function
// that ends it and turns the bound's expiry in err into an error matching
// driver.ErrUnavailable that names the bound (the caller's own deadline or
// cancellation is left as it is).
func (d *Driver) attempt(ctx context.Context) (context.Context, func(err error) error) {
	if d.attemptTimeout <= 0 {
		return ctx, func(err error) error { return err }
	}
	actx, cancel := context.WithTimeout(ctx, d.attemptTimeout)
	return actx, func(err error) error {
		expired := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || !expired {
			return err
		}
		return fmt.Errorf("%w: redisdriver: no answer within read_timeout %v: %w", driver.ErrUnavailable, d.attemptTimeout, err)
	}
}
