package redlockdriver

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
)

// The Lua scripts beside this file. redis.Script sends EVALSHA and falls back
// to EVAL when a server answers NOSCRIPT (a restarted server, or SCRIPT
// FLUSH), so each script crosses the network once per server.
var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed refreshbatch.lua
	refreshBatchLua string
	//go:embed check.lua
	checkLua string
	//go:embed shared.lua
	sharedLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed force.lua
	forceLua string
	//go:embed relabel.lua
	relabelLua string
	//go:embed set.lua
	setLua string

	acquireScript      = redis.NewScript(acquireLua)
	releaseScript      = redis.NewScript(releaseLua)
	refreshScript      = redis.NewScript(refreshLua)
	checkScript        = redis.NewScript(checkLua)
	refreshBatchScript = redis.NewScript(refreshBatchLua)
	sharedScript       = redis.NewScript(sharedLua)
	inspectScript      = redis.NewScript(inspectLua)
	forceScript        = redis.NewScript(forceLua)
	relabelScript      = redis.NewScript(relabelLua)
	setScript          = redis.NewScript(setLua)
)

// Results of acquire.lua and shared.lua.
const (
	acqTaken     = 1  // 1
	acqHeld      = 2  // {2, pttl}: already ours
	acqBusy      = 0  // {0, holder, pttl}
	acqWrongType = -1 // {-1}: the lock key is not a string
	acqForeign   = -3 // {-3}: the waiters or writers key is not a hash, or holders not a sorted set
)

// Results of refresh.lua, per lock of refreshbatch.lua.
const (
	refNotHeld = 0 // not held here
	refHeld    = 1 // extended
	refForced  = 2 // not held here: an operator evicted the owner (ForceRelease)
)

// sharedMarker is what the lock key holds while shared holds exist (see
// shared.lua); writerWaits is the holder shared.lua names when a waiting
// writer holds readers back. No owner starts with a NUL byte.
const (
	sharedMarker = redislayout.SharedMarker
	writerWaits  = "\x00writer"
)

var isNoScript = redisproto.IsNoScript

// keys are the names of a lock's keys, the same on every server, laid out as
// internal/redislayout says (redisdriver's layout, so a server shows a lock
// the same way to an operator whichever driver took it): this driver uses the
// lock key, holders, labels, forced, and of its own waiters (inbox channel ->
// registration deadline of a waiting driver), writers and grant (the
// exclusive holder's record "owner 0 since-µs label", outliving the lock by
// up to ten TTLs: recordKeep).
type keys = redislayout.Keys

func (d *Driver) keys(key string) keys { return redislayout.NewKeys(d.prefix, key) }
