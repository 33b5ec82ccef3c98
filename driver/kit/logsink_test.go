package kit

import (
	"context"
	"log/slog"
	"testing"

	"github.com/distlock/lock/internal/logtest"
)

// Each line becomes one record at the level of the first rule that matches
// it, with the client attribute; a line no rule matches gets Default.
func TestLogSinkLevelsFromTheTable(t *testing.T) {
	rec := logtest.New()
	s := &LogSink{
		Client: "client-x",
		Levels: []LevelRule{
			{From: slog.LevelError, Level: slog.LevelWarn},
			{From: slog.LevelWarn, Prefix: "retrying", Level: slog.LevelDebug},
			{From: slog.LevelWarn, Level: slog.LevelInfo},
			{Prefix: "authentication failed", Level: slog.LevelWarn},
			{Contains: "loop terminated", Level: slog.LevelInfo},
		},
		Default:    slog.LevelDebug,
		TrimPrefix: "x: ",
	}
	s.Set(rec.Logger())
	ctx := context.Background()
	s.Log(ctx, slog.LevelError, "lost", slog.String("k", "v"))
	s.Log(ctx, slog.LevelWarn, "retrying of unary invoker")
	s.Log(ctx, slog.LevelWarn, "keepalive failed")
	s.Log(ctx, slog.LevelDebug, "authentication failed here") // From zero: Info and above only
	s.Printf(ctx, "authentication failed for %s", "me")
	s.Printf(ctx, "x: recv loop terminated: %v", "EOF")
	s.Printf(ctx, "something else %d", 1)
	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelWarn, "lost"},
		{slog.LevelDebug, "retrying of unary invoker"},
		{slog.LevelInfo, "keepalive failed"},
		{slog.LevelDebug, "authentication failed here"},
		{slog.LevelWarn, "authentication failed for me"},
		{slog.LevelInfo, "recv loop terminated: EOF"},
		{slog.LevelDebug, "something else 1"},
	}
	got := rec.Matching(func(logtest.Record) bool { return true })
	if len(got) != len(want) {
		t.Fatalf("%d records; want %d:\n%s", len(got), len(want), rec.All())
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg {
			t.Errorf("record %d = %v; want %s %q", i, got[i], w.level, w.msg)
		}
		if got[i].Attrs["client"] != "client-x" {
			t.Errorf("record %d lacks client=client-x: %v", i, got[i])
		}
	}
	if got[0].Attrs["k"] != "v" {
		t.Errorf("record 0 lost its attribute: %v", got[0])
	}
}

// Without a logger nothing is logged or formatted; a nil sink has none.
func TestLogSinkWithoutLoggerDrops(t *testing.T) {
	var s LogSink
	s.Printf(context.Background(), "%v", formatPanics{})
	s.Log(context.Background(), slog.LevelError, "x")
	if s.Enabled(context.Background(), slog.LevelError, "x") {
		t.Fatal("Enabled without a logger")
	}
	var nilSink *LogSink
	if nilSink.Logger() != nil {
		t.Fatal("a nil sink has a logger")
	}
	rec := logtest.New()
	s.Set(rec.Logger())
	s.Log(context.Background(), slog.LevelDebug, "y")
	if got := rec.Matching(func(logtest.Record) bool { return true }); len(got) != 1 || got[0].Level != slog.LevelInfo {
		t.Fatalf("the zero sink logged %v; want one record at Info", got)
	}
	s.Set(nil)
	s.Log(context.Background(), slog.LevelError, "z")
	if got := rec.Matching(func(logtest.Record) bool { return true }); len(got) != 1 {
		t.Fatalf("logged after Set(nil): %s", rec.All())
	}
}

type formatPanics struct{}

func (formatPanics) String() string { panic("formatted a line nobody logs") }
