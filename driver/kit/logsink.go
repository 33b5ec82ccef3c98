package kit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
)

// LogSink passes a client library's log lines to the *slog.Logger it was
// given last (by the driver's UseLogger, see driver.LoggerUser), and drops
// them before that or without one: a library must not print. Each line
// becomes one record at the level its first matching rule of Levels gives
// (Default if none matches), with the attribute client=Client.
//
// Set the fields before the sink is used; Set may be called at any time.
// The zero value logs every line at slog.LevelInfo, without a client
// attribute, once a logger is set.
type LogSink struct {
	Client     string      // the client's name, the client attribute's value ("" for none)
	Levels     []LevelRule // the first rule that matches a line gives its level
	Default    slog.Level  // the level of a line that no rule matches
	TrimPrefix string      // cut from the start of each message (a client's own "redis: ")

	l atomic.Pointer[slog.Logger]
}

// A LevelRule matches a client's line and gives the level of its record.
// Every condition set must hold: the line starts with Prefix, it contains
// Contains, and the client logged it at From or above. A client without
// levels of its own (Printf) logs at slog.LevelInfo, so a rule with From
// left zero matches each of its lines.
type LevelRule struct {
	Prefix   string
	Contains string
	From     slog.Level
	Level    slog.Level
}

// Set makes the sink log to l (nil: to nothing).
func (s *LogSink) Set(l *slog.Logger) { s.l.Store(l) }

// Logger is the sink's logger, nil when none is set or s is nil.
func (s *LogSink) Logger() *slog.Logger {
	if s == nil {
		return nil
	}
	return s.l.Load()
}

// Level is the level of the record for a line (a message, or a Printf
// format) that the client logged at clientLevel.
func (s *LogSink) Level(clientLevel slog.Level, line string) slog.Level {
	for _, r := range s.Levels {
		if clientLevel >= r.From && strings.HasPrefix(line, r.Prefix) && strings.Contains(line, r.Contains) {
			return r.Level
		}
	}
	return s.Default
}

// Enabled reports whether a line the client logged at clientLevel would be
// logged: a logger is set and takes the record's level.
func (s *LogSink) Enabled(ctx context.Context, clientLevel slog.Level, line string) bool {
	l := s.Logger()
	return l != nil && l.Enabled(ctx, s.Level(clientLevel, line))
}

// Printf logs a line of a client without levels of its own, ranked by its
// format (the same format always gets the same level), and formats it only
// if the record is to be logged.
func (s *LogSink) Printf(ctx context.Context, format string, args ...any) {
	l := s.Logger()
	if l == nil {
		return
	}
	level := s.Level(slog.LevelInfo, format)
	if !l.Enabled(ctx, level) {
		return
	}
	s.emit(ctx, l, level, fmt.Sprintf(format, args...), nil)
}

// Log logs msg, which the client logged at clientLevel, with attrs after
// the client attribute.
func (s *LogSink) Log(ctx context.Context, clientLevel slog.Level, msg string, attrs ...slog.Attr) {
	l := s.Logger()
	if l == nil {
		return
	}
	level := s.Level(clientLevel, msg)
	if !l.Enabled(ctx, level) {
		return
	}
	s.emit(ctx, l, level, msg, attrs)
}

func (s *LogSink) emit(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs []slog.Attr) {
	if s.Client != "" {
		attrs = append([]slog.Attr{slog.String("client", s.Client)}, attrs...)
	}
	l.LogAttrs(ctx, level, strings.TrimPrefix(msg, s.TrimPrefix), attrs...)
}
