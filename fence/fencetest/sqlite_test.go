package fencetest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
	_ "modernc.org/sqlite"
)

// openSQLite opens a fresh database file; writers wait for each other's write
// lock (busy_timeout) instead of failing with SQLITE_BUSY.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "fence.db") + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(wal)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLiteFenceAdmitsByTheRule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := fenceprops.SQL{DB: openSQLite(t), Fence: fence.SQL{Dialect: fence.SQLite}}
	if err := s.Rules(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSQLitePerRowPatternRefusesOlderTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := fenceprops.SQL{DB: openSQLite(t), Fence: fence.SQL{Dialect: fence.SQLite}}
	if err := s.PerRow(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSQLiteConcurrentWritersEndWithTheLargestToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := fenceprops.SQL{DB: openSQLite(t), Fence: fence.SQL{Dialect: fence.SQLite}}
	if err := s.Fence.CreateTable(ctx, s.DB); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		st, err := s.Store(ctx, "resource-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fenceprops.ConcurrentWriters(ctx, st, 16, 16); err != nil {
			t.Fatal(err)
		}
	}
}
