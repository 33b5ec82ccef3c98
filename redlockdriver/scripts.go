package redlockdriver

import (
	_ "embed"

	"github.com/distlock/lock/internal/redisproto"
	"github.com/redis/go-redis/v9"
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
	//go:embed check.lua
	checkLua string

	acquireScript = redis.NewScript(acquireLua)
	releaseScript = redis.NewScript(releaseLua)
	refreshScript = redis.NewScript(refreshLua)
	checkScript   = redis.NewScript(checkLua)
)

// Results of acquire.lua.
const (
	acqTaken     = 1  // 1
	acqHeld      = 2  // {2, pttl}: already ours
	acqBusy      = 0  // {0, holder, pttl}
	acqWrongType = -1 // {-1}: the lock key is not a string
	acqForeign   = -3 // {-3}: the waiters key is not a hash
)

var isNoScript = redisproto.IsNoScript
