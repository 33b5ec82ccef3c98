package redisproto

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// SilenceGoRedis replaces go-redis's default logger, which writes to stderr
// (a failed dial, a broken pub/sub connection), with one that drops every
// line: a library must not print. go-redis v9 has one logger for the whole
// process (redis.SetLogger) and no way to read it back, so the drivers call
// this from their init functions, before any code of the program that imports
// them runs: a program that sets its own logger with redis.SetLogger, in main
// or in the init of a package that imports a driver, keeps it. (Only a
// package initialised before the driver, one that does not import it, could
// see its logger replaced; set it in main then.)
func SilenceGoRedis() { redis.SetLogger(discard{}) }

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
