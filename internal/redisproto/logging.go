package redisproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/distlock/lock/driver/kit"
	"github.com/redis/go-redis/v9"
)

// RouteGoRedis replaces go-redis's default logger, which writes to stderr (a
// failed dial, a broken pub/sub connection), with one that passes a line to
// the logger of the driver that made the call, found in the call's context
// (see WithLogSink), and drops every other line: a library must not print.
//
// go-redis v9 has one logger for the whole process (redis.SetLogger) and no
// way to read it back, so the drivers call this from their init functions,
// before any code of the program that imports them runs: a program that sets
// its own logger with redis.SetLogger, in main or in the init of a package
// that imports a driver, keeps it (and the drivers' routing is off). (Only a
// package initialised before the driver, one that does not import it, could
// see its logger replaced; set it in main then.)
//
// go-redis prints most connection lines with a context of its own, not the
// call's (its pool dials in a goroutine of its own, on context.Background):
// those cannot be told apart by driver and are dropped. The one that matters,
// a failed dial, is seen by the driver's DialWatch instead, which logs it.
func RouteGoRedis() { redis.SetLogger(router{}) }

// A LogSink is where one driver's lines go: a *slog.Logger set at any time
// (by the driver's UseLogger), nil for none. The zero value logs nothing.
// It is the kit's sink; which level a go-redis line gets is goRedisLevels'.
type LogSink = kit.LogSink

type sinkKey struct{}

// WithLogSink returns ctx carrying s: a go-redis line printed with that
// context (or one derived from it) goes to s's logger. Drivers give their
// background context this, and their DialWatch adds it to every command.
func WithLogSink(ctx context.Context, s *LogSink) context.Context {
	return context.WithValue(ctx, sinkKey{}, s)
}

type router struct{}

// Printf sends a go-redis line to the logger in ctx, at a level chosen by
// what the line is about (levelOf), with the attribute client=go-redis.
func (router) Printf(ctx context.Context, format string, args ...any) {
	if ctx == nil {
		return
	}
	s, _ := ctx.Value(sinkKey{}).(*LogSink)
	l := s.Logger()
	if l == nil {
		return
	}
	level := goRedisLevels.Level(slog.LevelInfo, format)
	if !l.Enabled(ctx, level) {
		return
	}
	l.LogAttrs(ctx, level, strings.TrimPrefix(fmt.Sprintf(format, args...), "redis: "), slog.String("client", "go-redis"))
}

// goRedisLevels ranks a go-redis line by its format (its logger is never
// set: each line goes to its own driver's sink). Lost data and a change of
// primary are what an operator must see (Warn); failures of a connection or
// a node are Info, since go-redis repeats them on every attempt while a server
// is away, and the Locker already warns once that the backend is unreachable;
// the rest (push notifications, hooks, rounding of durations) is Debug.
var goRedisLevels = &kit.LogSink{Default: slog.LevelDebug, Levels: []kit.LevelRule{
	{Contains: "dropped", Level: slog.LevelWarn},
	{Contains: "new master", Level: slog.LevelWarn},
	{Contains: "failed", Level: slog.LevelInfo},
	{Contains: "failing", Level: slog.LevelInfo},
	{Contains: "reconnecting", Level: slog.LevelInfo},
	{Contains: "reloading", Level: slog.LevelInfo},
}}

// dialResult logs a failed dial to addr on the sink's logger, once per run of
// failures to that address (Warn: the server at addr does not answer), and
// the first dial that succeeds after it (Info). The DialWatch calls it: the
// line go-redis prints for the same failure carries none of the driver's
// context.
func (w *DialWatch) dialResult(ctx context.Context, addr string, err error) {
	l := w.sink.Logger()
	if l == nil {
		return
	}
	if err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)) {
		return // the dial was given up (the request's deadline, or Close): not the server's doing
	}
	w.mu.Lock()
	if w.failing == nil {
		w.failing = map[string]bool{}
	}
	was := w.failing[addr]
	w.failing[addr] = err != nil
	w.mu.Unlock()
	switch {
	case err != nil && !was:
		l.LogAttrs(ctx, slog.LevelWarn, "dial failed", slog.String("client", "go-redis"), slog.String("addr", addr), slog.String("error", err.Error()))
	case err == nil && was:
		l.LogAttrs(ctx, slog.LevelInfo, "dial succeeded again", slog.String("client", "go-redis"), slog.String("addr", addr))
	}
}
