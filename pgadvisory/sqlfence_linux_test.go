//go:build linux

package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/staleholder"
	"github.com/distlock/lock/internal/testserver"
)

// Kleppmann's scenario on PostgreSQL with a real holder process: it takes the
// advisory lock and is frozen with SIGSTOP; the lock is session-bound, so an
// operator evicts it with ForceRelease (its session is ended); a second holder
// takes the lock and writes the row through the SQL fence; the first is
// continued and its fenced write is refused with ErrStale; the row holds the
// second holder's value.
func TestPausedHolderProcessOnPostgresIsRefusedBySQLFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := testserver.Postgres(t)
	db := openSQL(t, dsn)
	if err := (fence.SQL{Dialect: fence.Postgres}).CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS fence_demo (id TEXT PRIMARY KEY, value TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	key := "invoice-" + t.Name() + "-" + fmt.Sprint(time.Now().UnixNano())
	// ForceRelease finds a holder's session through the holders table.
	lockURL := withParam(t, dsn, "holders", "true")

	// The holder's write is holderWrite, to the row key in fence_demo.
	first := staleholder.Start(t, staleholder.Spec{URL: lockURL, Key: key, Resource: plainURL(dsn) + " " + key})
	firstToken := first.Token
	// The timeline, logged for docs/FENCING.md.
	begin := time.Now()
	event := func(format string, args ...any) {
		t.Logf("%7.1fms  %s", float64(time.Since(begin).Microseconds())/1000, fmt.Sprintf(format, args...))
	}
	event("holder A (pid %d) holds the advisory lock with token %d", first.Pid(), firstToken)
	first.Freeze(t)
	event("A frozen (SIGSTOP); its session keeps the lock")

	second, err := lock.Open(ctx, lockURL)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire while the frozen holder's session holds the lock = %v, want ErrLocked", err)
	}
	if err := second.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	event("operator evicts A (ForceRelease ends its session)")
	err = second.Do(ctx, key, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		if l.Token() <= firstToken {
			t.Errorf("second token %d is not above the frozen holder's %d", l.Token(), firstToken)
		}
		event("holder B holds the lock with token %d", l.Token())
		err := writeFenced(ctx, db, key, l.Token(), "second")
		event("B's fenced write, token %d: %v", l.Token(), err)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	event("A continued (SIGCONT); it writes as if it still held the lock")
	if got := first.Write(t, "first, after the pause"); got != staleholder.Stale {
		t.Fatalf("the resumed holder's fenced write: %q, want %s", got, staleholder.Stale)
	}
	event("A's fenced write, token %d: ErrStale, rolled back", firstToken)
	var value string
	if err := db.QueryRowContext(ctx, `SELECT value FROM fence_demo WHERE id = $1`, key).Scan(&value); err != nil {
		t.Fatal(err)
	}
	if value != "second" {
		t.Fatalf("the row holds %q, want the second holder's value", value)
	}
}
