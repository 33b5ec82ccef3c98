//go:build linux

package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	_ "github.com/distlock/lock/filedriver"
	"github.com/distlock/lock/internal/staleholder"
	"github.com/distlock/lock/internal/testserver"
)

// pausedHolder runs Kleppmann's scenario with the lock on the file backend and
// the resource a row in db: the holder process takes the lock and is frozen
// with SIGSTOP past its TTL, evicted with ForceRelease (its flock stays); the
// second holder takes the lock and writes through the SQL fence; the first is
// continued, and its fenced write is refused with ErrStale; the row holds the
// second holder's value.
func pausedHolder(t *testing.T, db *sql.DB, driverName, dsn, dialect string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := dialectOf(dialect)
	if err := (fence.SQL{Dialect: d}).CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE TABLE fence_demo (id INTEGER PRIMARY KEY, value TEXT NOT NULL)`, `INSERT INTO fence_demo (id, value) VALUES (1, '')`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	lockURL := (&url.URL{Scheme: "file", Path: t.TempDir()}).String()
	// The holder's write is holderWrite, to db.
	first := staleholder.Start(t, staleholder.Spec{URL: lockURL, Key: pausedKey, TTL: 200 * time.Millisecond, Resource: holderResource(driverName, dialect, dsn)})
	firstToken := first.Token
	stoppedAt := first.Freeze(t)
	second, err := lock.Open(ctx, lockURL)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The holder's lease (200ms) runs out while it is frozen; its flock stays.
	for time.Since(stoppedAt) < 300*time.Millisecond {
		if _, err := second.TryAcquire(ctx, pausedKey); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TryAcquire while the frozen holder keeps its flock = %v, want ErrLocked", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := second.ForceRelease(ctx, pausedKey); err != nil {
		t.Fatal(err)
	}
	err = second.Do(ctx, pausedKey, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		if l.Token() <= firstToken {
			t.Errorf("second token %d is not above the frozen holder's %d", l.Token(), firstToken)
		}
		return writeFenced(ctx, db, d, l.Token(), "second")
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Write(t, "first, after the pause"); got != staleholder.Stale {
		t.Fatalf("the resumed holder's fenced write: %q, want %s", got, staleholder.Stale)
	}
	var value string
	if err := db.QueryRowContext(ctx, `SELECT value FROM fence_demo WHERE id = 1`).Scan(&value); err != nil {
		t.Fatal(err)
	}
	if value != "second" {
		t.Fatalf("the row holds %q, want the second holder's value", value)
	}
}

func TestPausedHolderProcessIsRefusedBySQLiteFence(t *testing.T) {
	dsn := "file:" + t.TempDir() + "/fence.db?_pragma=busy_timeout(20000)&_pragma=journal_mode(wal)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pausedHolder(t, db, "sqlite", dsn, "sqlite")
}

func TestPausedHolderProcessIsRefusedByMariaDBFence(t *testing.T) {
	dsn := testserver.StartMariaDB(t).URL()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pausedHolder(t, db, "mysql", dsn, "mysql")
}
