package etcddriver

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

var _ driver.LoggerUser = (*Driver)(nil)

// UseLogger implements driver.LoggerUser: on a driver opened from a URL, the
// etcd client's lines go to l (see zapToSlog), with the attribute
// client=etcd. A driver made by New leaves the program's client alone.
func (d *Driver) UseLogger(l *slog.Logger) {
	if d.logs != nil {
		d.logs.Set(l)
	}
}

// zapToSlog is the etcd client's zap logger on a client the driver opens: a
// zapcore.Core that passes each entry, with its fields, to sink (see
// newLogSink), which drops it until UseLogger gave a logger (a library does
// not write to the program's stderr).
func zapToSlog(sink *kit.LogSink) *zap.Logger {
	return zap.New(&slogCore{sink: sink})
}

// newLogSink is the sink of the etcd client's lines, ranked by etcdLevels.
func newLogSink() *kit.LogSink {
	return &kit.LogSink{Client: "etcd", Levels: etcdLevels, Default: slog.LevelDebug}
}

type slogCore struct {
	sink   *kit.LogSink
	fields []zapcore.Field // from With
}

// etcdLevels ranks an etcd client entry. The client logs at Warn each retry
// of a request (per operation: Debug here; the Locker warns once that the
// backend is unreachable) and a failing lease keepalive loop (Info: the
// connection's life); its Errors are Warn; its Info and Debug are Debug.
var etcdLevels = []kit.LevelRule{
	{From: slog.LevelError, Level: slog.LevelWarn},
	{From: slog.LevelWarn, Prefix: "retrying", Level: slog.LevelDebug},
	{From: slog.LevelWarn, Level: slog.LevelInfo},
}

// slogLevel is zap's level l as slog's.
func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

// Enabled implements zapcore.LevelEnabler: any level while a logger is set
// (Check decides by the entry's message too).
func (c *slogCore) Enabled(zapcore.Level) bool { return c.sink.Logger() != nil }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{sink: c.sink, fields: append(slices.Clip(c.fields), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.sink.Enabled(context.Background(), slogLevel(e.Level), e.Message) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if c.sink.Logger() == nil {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.sink.Log(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (*slogCore) Sync() error { return nil }
