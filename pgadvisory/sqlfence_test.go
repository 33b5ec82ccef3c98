package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
	"github.com/distlock/lock/internal/testserver"
)

// openSQL opens the test server's database through database/sql and pgx's stdlib.
func openSQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", plainURL(dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLFenceOnPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := fenceprops.SQL{DB: openSQL(t, testserver.Postgres(t)), Fence: fence.SQL{Dialect: fence.Postgres}}
	t.Run("AdmitsByTheRule", func(t *testing.T) {
		if err := s.Rules(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PerRowPatternRefusesOlderTokens", func(t *testing.T) {
		if err := s.PerRow(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ConcurrentWritersEndWithTheLargestToken", func(t *testing.T) {
		if err := s.Fence.CreateTable(ctx, s.DB); err != nil {
			t.Fatal(err)
		}
		// A fresh resource each run: the server, and the tokens its fence
		// table keeps, outlive one run of the test (-count).
		run := time.Now().UnixNano()
		for i := range 3 {
			st, err := s.Store(ctx, fmt.Sprintf("%s-%d-%d", t.Name(), run, i))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fenceprops.ConcurrentWriters(ctx, st, 24, 24); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// The driver's default fencing sequence is named distlock_fence; a fence
// table of that name is refused by CreateTable instead of CREATE TABLE IF NOT
// EXISTS passing silently over the sequence, and the default table lives
// beside the sequence.
func TestSQLFenceTableNamedAsTheFencingSequenceIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testserver.Postgres(t)
	locker, err := lock.Open(ctx, dsn) // default prefix: sequence distlock_fence
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	l, err := locker.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	db := openSQL(t, dsn)
	var kind string
	if err := db.QueryRowContext(ctx, `SELECT relkind::text FROM pg_class WHERE relname = 'distlock_fence'`).Scan(&kind); err != nil || kind != "S" {
		t.Fatalf("distlock_fence: relkind %q (%v), want the driver's sequence (S)", kind, err)
	}
	err = fence.SQL{Dialect: fence.Postgres, Table: "distlock_fence"}.CreateTable(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "not a fence table") {
		t.Fatalf("CreateTable(distlock_fence) over the sequence = %v, want an error saying it is not a fence table", err)
	}
	if err := (fence.SQL{Dialect: fence.Postgres}).CreateTable(ctx, db); err != nil {
		t.Fatalf("CreateTable(default %s) beside the sequence: %v", fence.DefaultTable, err)
	}
	if err := (fence.SQL{Dialect: fence.Postgres}).Admit(ctx, db, t.Name(), l.Token()); err != nil {
		t.Fatalf("Admit in the default table: %v", err)
	}
}

// holderWrite is the paused holder's write (internal/staleholder) of
// sqlfence_linux_test.go: resource is "DSN KEY", the database and the row;
// the write is writeFenced.
func holderWrite(ctx context.Context, resource string, token uint64, value string) error {
	dsn, key, _ := strings.Cut(resource, " ")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return writeFenced(ctx, db, key, token, value)
}

// writeFenced is the guarded write: in one transaction, Admit and then the
// update of the resource's row in fence_demo.
func writeFenced(ctx context.Context, db *sql.DB, resource string, token uint64, value string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := (fence.SQL{Dialect: fence.Postgres}).Admit(ctx, tx, resource, token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO fence_demo (id, value) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET value = excluded.value`, resource, value); err != nil {
		return err
	}
	return tx.Commit()
}
