package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/distlock/lock"
)

// defaultLogLevel is --log-level when not given. warn: a run that goes well
// prints nothing (cron mails whatever a job prints; scripts read stderr),
// while what an operator must know still shows: a lost lock with its cause,
// the backend unreachable, a server restarted or failed over, a server of a
// Redlock that does not answer. info adds the recoveries; debug every
// acquisition, refresh and release.
const defaultLogLevel = "warn"

// logLevels are --log-level's values; off gives the Locker no logger.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// checkLogFlags returns a message for a bad --log-level or --log-format.
func checkLogFlags(level, format string) error {
	if _, ok := logLevels[level]; !ok && level != "off" {
		return fmt.Errorf("--log-level %q: want debug, info, warn, error or off", level)
	}
	if format != "text" && format != "json" {
		return fmt.Errorf("--log-format %q: want text or json", format)
	}
	return nil
}

// newLogger is the Locker's logger on w as the flags say, nil for off. The
// flags were checked by parseRun.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	lv, ok := logLevels[level]
	if !ok {
		return nil
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// lossCauses name why a lock was lost, as the lock.Locker's logs and metrics
// do (the distlock.loss.cause attribute), most specific first.
var lossCauses = []struct {
	err  error
	name string
}{
	{lock.ErrForceReleased, "force_released"},
	{lock.ErrTakenOver, "taken_over"},
	{lock.ErrServerChanged, "server_changed"},
	{lock.ErrSessionExpired, "session_expired"},
	{lock.ErrExpired, "expired"},
}

// lossCause names the cause of a loss, "unknown" when the backend could not
// tell it.
func lossCause(err error) string {
	for _, c := range lossCauses {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "unknown"
}
