package zkdriver

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/distlock/lock/driver"
)

var _ driver.LoggerUser = (*Driver)(nil)

// zkLogger is go-zookeeper's logger on a connection the driver opened: it
// passes go-zookeeper's lines (connections, reconnections, session
// handshakes) to the Locker's logger once UseLogger gave one, and drops them
// before that or without one: go-zookeeper's default logger writes to the
// standard logger, and a library must not print. Failures reach the caller as
// errors either way.
type zkLogger struct{ l atomic.Pointer[slog.Logger] }

// Printf implements zk.Logger.
func (z *zkLogger) Printf(format string, args ...any) {
	l := z.l.Load()
	if l == nil {
		return
	}
	level := zkLevel(format)
	// go-zookeeper gives no context: its lines come from its own loops.
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	l.LogAttrs(ctx, level, fmt.Sprintf(format, args...), slog.String("client", "go-zookeeper"))
}

// zkLevel ranks a go-zookeeper line by its format. A refused authentication
// is Warn (it will not fix itself); a failed connection attempt, a dropped
// connection and a new session or reconnection are Info, since go-zookeeper
// repeats the attempts while a server is away and the Locker already warns
// once that the backend is unreachable; the rest is Debug.
func zkLevel(format string) slog.Level {
	switch {
	case strings.HasPrefix(format, "authentication failed"):
		return slog.LevelWarn
	case strings.HasPrefix(format, "failed to connect"), strings.HasPrefix(format, "connected to"),
		strings.HasPrefix(format, "authenticated"), strings.Contains(format, "loop terminated"):
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

// UseLogger implements driver.LoggerUser: on a driver opened from a URL,
// go-zookeeper's lines go to l (see zkLogger), with the attribute
// client=go-zookeeper. A driver made by New with the program's own *zk.Conn
// leaves that connection's logger alone.
func (d *Driver) UseLogger(l *slog.Logger) { d.zkLog.l.Store(l) }
