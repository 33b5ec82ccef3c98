package servertest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock/internal/testserver"
)

func pgConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestPostgres(t *testing.T) {
	url := testserver.Postgres(t)
	if again := testserver.Postgres(t); again != url {
		t.Fatalf("second call gave another server: %s then %s", url, again)
	}
	conn := pgConnect(t, url)
	var got int
	if err := conn.QueryRow(context.Background(), "SELECT 40 + 2").Scan(&got); err != nil || got != 42 {
		t.Fatalf("SELECT 40 + 2 = %d, %v", got, err)
	}
}

// TestStartPostgres is the smoke test: start, use with pgx, stop.
func TestStartPostgres(t *testing.T) {
	begin := time.Now()
	s := testserver.StartPostgres(t)
	t.Logf("postgres answered %v after start (initdb included)", time.Since(begin).Round(time.Millisecond))
	ctx := context.Background()
	conn := pgConnect(t, s.URL())
	if _, err := conn.Exec(ctx, "CREATE TABLE t (k text PRIMARY KEY); INSERT INTO t VALUES ('v')"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := conn.QueryRow(ctx, "SELECT k FROM t").Scan(&got); err != nil || got != "v" {
		t.Fatalf("SELECT = %q, %v; want v", got, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("connection still answers after Stop")
	}
	if c, err := pgx.Connect(ctx, s.URL()); err == nil {
		c.Close(ctx)
		t.Fatal("connected after Stop")
	}
}

func TestPostgresRestart(t *testing.T) {
	s := testserver.StartPostgres(t)
	ctx := context.Background()
	before := pgConnect(t, s.URL())
	if _, err := before.Exec(ctx, "CREATE TABLE t (k int)"); err != nil {
		t.Fatal(err)
	}

	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if err := before.Ping(ctx); err == nil {
		t.Fatal("a connection from before the restart still answers")
	}
	if _, err := pgConnect(t, s.URL()).Exec(ctx, "SELECT * FROM t"); err != nil {
		t.Fatalf("after Restart(true) the table is gone: %v", err)
	}

	// A crash: PostgreSQL recovers its data from the WAL.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if _, err := pgConnect(t, s.URL()).Exec(ctx, "SELECT * FROM t"); err != nil {
		t.Fatalf("after Kill and Restart(true) the table is gone: %v", err)
	}

	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if _, err := pgConnect(t, s.URL()).Exec(ctx, "SELECT * FROM t"); err == nil {
		t.Fatal("after Restart(false) the table is still there")
	}
}

func TestPostgresPause(t *testing.T) {
	s := testserver.StartPostgres(t)
	conn := pgConnect(t, s.URL())
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("SELECT 1 answered while paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	// The timed-out query closed conn; a new connection works.
	if _, err := pgConnect(t, s.URL()).Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatalf("SELECT 1 after Resume: %v", err)
	}
}
