package etcddriver

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/distlock/lock/driver"
)

var _ driver.LoggerUser = (*Driver)(nil)

// UseLogger implements driver.LoggerUser: on a driver opened from a URL, the
// etcd client's lines go to l (see zapToSlog), with the attribute
// client=etcd. A driver made by New leaves the program's client alone.
func (d *Driver) UseLogger(l *slog.Logger) {
	if d.logs != nil {
		d.logs.Store(l)
	}
}

// zapToSlog is the etcd client's zap logger on a client the driver opens: a
// zapcore.Core that passes each entry, with its fields, to the *slog.Logger
// in sink once UseLogger put one there, and drops it before that or without
// one (a library does not write to the program's stderr).
func zapToSlog(sink *atomic.Pointer[slog.Logger]) *zap.Logger {
	return zap.New(&slogCore{sink: sink})
}

type slogCore struct {
	sink   *atomic.Pointer[slog.Logger]
	fields []zapcore.Field // from With
}

// etcdLevel ranks an etcd client entry. The client logs at Warn each retry
// of a request (per operation: Debug here; the Locker warns once that the
// backend is unreachable) and a failing lease keepalive loop (Info: the
// connection's life); its Errors are Warn; its Info and Debug are Debug.
func etcdLevel(e zapcore.Entry) slog.Level {
	switch {
	case e.Level >= zapcore.ErrorLevel:
		return slog.LevelWarn
	case e.Level == zapcore.WarnLevel && !strings.HasPrefix(e.Message, "retrying"):
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

// Enabled implements zapcore.LevelEnabler: any level while a logger is set
// (Check decides by the entry's message too).
func (c *slogCore) Enabled(zapcore.Level) bool { return c.sink.Load() != nil }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{sink: c.sink, fields: append(slices.Clip(c.fields), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if l := c.sink.Load(); l != nil && l.Enabled(context.Background(), etcdLevel(e)) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	l := c.sink.Load()
	if l == nil {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	attrs = append(attrs, slog.String("client", "etcd"))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range enc.Fields {
			if !yield(k) {
				return
			}
		}
	}) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	l.LogAttrs(context.Background(), etcdLevel(e), e.Message, attrs...)
	return nil
}

func (*slogCore) Sync() error { return nil }
