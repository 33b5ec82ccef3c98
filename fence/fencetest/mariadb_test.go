package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
	"github.com/distlock/lock/internal/testserver"
	"github.com/go-sql-driver/mysql"
)

// openMariaDB opens srv's database with the DSN parameters params;
// clientFoundRows makes an UPDATE that leaves a row as it was count the row,
// which the per-row pattern needs on MySQL (see fence.StaleIfNoRows).
func openMariaDB(t *testing.T, ctx context.Context, srv *testserver.Server, params string) fenceprops.SQL {
	t.Helper()
	db, err := sql.Open("mysql", srv.URL()+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	return fenceprops.SQL{DB: db, Fence: fence.SQL{Dialect: fence.MySQL}, Retry: mysqlDeadlock}
}

// mysqlDeadlock: the server refused the transaction as a deadlock victim
// (1213) or gave up waiting for a lock (1205), and the client should retry.
func mysqlDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// One server serves the three properties: starting one takes seconds.
func TestMariaDBFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := testserver.StartMariaDB(t)
	s := openMariaDB(t, ctx, srv, "?clientFoundRows=true")
	t.Run("AdmitsByTheRule", func(t *testing.T) {
		if err := s.Rules(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// Admit does not read affected-row counts, so the flag makes no difference.
	t.Run("AdmitsByTheRuleWithoutClientFoundRows", func(t *testing.T) {
		if err := openMariaDB(t, ctx, srv, "").Rules(ctx); err != nil {
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
		for _, resource := range []string{"a", "b", "c"} {
			st, err := s.Store(ctx, resource)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fenceprops.ConcurrentWriters(ctx, st, 16, 16); err != nil {
				t.Fatal(err)
			}
		}
	})
}
