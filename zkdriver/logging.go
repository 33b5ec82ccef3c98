package zkdriver

import (
	"context"
	"log/slog"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

var _ driver.LoggerUser = (*Driver)(nil)

// zkLogger is go-zookeeper's logger on a connection the driver opened: it
// passes go-zookeeper's lines (connections, reconnections, session
// handshakes) to the Locker's logger once UseLogger gave one, and drops them
// before that or without one: go-zookeeper's default logger writes to the
// standard logger, and a library must not print. Failures reach the caller as
// errors either way.
type zkLogger struct{ sink kit.LogSink }

func newZKLogger() *zkLogger {
	return &zkLogger{sink: kit.LogSink{Client: "go-zookeeper", Levels: zkLevels, Default: slog.LevelDebug}}
}

// Printf implements zk.Logger. go-zookeeper gives no context: its lines come
// from its own loops.
func (z *zkLogger) Printf(format string, args ...any) {
	z.sink.Printf(context.Background(), format, args...)
}

// zkLevels ranks a go-zookeeper line by its format. A refused authentication
// is Warn (it will not fix itself); a failed connection attempt, a dropped
// connection and a new session or reconnection are Info, since go-zookeeper
// repeats the attempts while a server is away and the Locker already warns
// once that the backend is unreachable; the rest is Debug.
var zkLevels = []kit.LevelRule{
	{Prefix: "authentication failed", Level: slog.LevelWarn},
	{Prefix: "failed to connect", Level: slog.LevelInfo},
	{Prefix: "connected to", Level: slog.LevelInfo},
	{Prefix: "authenticated", Level: slog.LevelInfo},
	{Contains: "loop terminated", Level: slog.LevelInfo},
}

// UseLogger implements driver.LoggerUser: on a driver opened from a URL,
// go-zookeeper's lines go to l (see zkLogger), with the attribute
// client=go-zookeeper. A driver made by New with the program's own *zk.Conn
// leaves that connection's logger alone.
func (d *Driver) UseLogger(l *slog.Logger) { d.zkLog.sink.Set(l) }
