package redisproto

import (
	"context"
	"log/slog"
	"testing"

	"github.com/distlock/lock/internal/logtest"
)

// A go-redis line printed with a driver's context reaches that driver's
// logger, at the level its subject calls for; a line without one, or with a
// sink that has no logger, goes nowhere.
func TestGoRedisLinesGoToTheLoggerOfTheirContext(t *testing.T) {
	rec := logtest.New()
	var sink, silent LogSink
	sink.Set(rec.Logger())
	ctx := WithLogSink(context.Background(), &sink)
	for format, want := range map[string]slog.Level{
		"redis: %v channel is full for %s (message is dropped)":        slog.LevelWarn,
		"sentinel: new master=%q addr=%q":                              slog.LevelWarn,
		"redis: connection pool: failed to dial after %d attempts: %v": slog.LevelInfo,
		"push: conn[%d] error processing pending notifications":        slog.LevelDebug,
	} {
		router{}.Printf(ctx, format, 1, 2)
		got := rec.Matching(func(r logtest.Record) bool { return r.Attrs["client"] == "go-redis" })
		if len(got) == 0 || got[len(got)-1].Level != want {
			t.Errorf("%q logged as %v, want level %v", format, got, want)
		}
	}
	n := len(rec.Matching(func(logtest.Record) bool { return true }))
	router{}.Printf(context.Background(), "redis: failed")
	router{}.Printf(WithLogSink(context.Background(), &silent), "redis: failed")
	if m := len(rec.Matching(func(logtest.Record) bool { return true })); m != n {
		t.Errorf("lines without the sink's context reached its logger: %d records, want %d", m, n)
	}
}
