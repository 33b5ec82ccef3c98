package pgadvisory_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock/internal/testserver"
)

// connect opens a plain connection (an operator's psql, say), closed at the end
// of the test.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, plainURL(dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// passwordServer starts a private server on which TCP logins other than the
// superuser's need a SCRAM password, and creates role with password. It returns
// the server.
func passwordServer(t *testing.T, role, password string) *testserver.Server {
	t.Helper()
	srv := testserver.StartPostgres(t)
	admin := connect(t, srv.URL())
	mustExec(t, admin, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN PASSWORD '`+password+`'`)
	// The superuser keeps trust (the test server's own probe logs in so); every
	// other role must give its password.
	mustExec(t, admin, `DO $$ BEGIN EXECUTE format('COPY (SELECT * FROM (VALUES (%L), (%L), (%L)) AS v(line)) TO %L',
		'local all all trust', 'host all postgres 127.0.0.1/32 trust', 'host all all 127.0.0.1/32 scram-sha-256',
		current_setting('hba_file')); END $$`)
	var ok bool
	if err := admin.QueryRow(context.Background(), `SELECT pg_reload_conf()`).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_reload_conf: %v", err)
	}
	// The reload is asynchronous: wait until the new rules are in force.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_hba_file_rules WHERE auth_method = 'scram-sha-256'`).Scan(&n)
		if err == nil && n == 1 {
			if c, err := pgx.Connect(context.Background(), roleURL(srv, role, "wrong")); err != nil {
				break
			} else {
				c.Close(context.Background())
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("pg_hba.conf with passwords not in force after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return srv
}

// roleURL is srv's URL for role with password.
func roleURL(srv *testserver.Server, role, password string) string {
	u, _ := url.Parse(srv.URL())
	u.User = url.UserPassword(role, password)
	return u.String()
}

// eventually waits until cond holds, polling, and fails the test if it does
// not within timeout. It orders a test after a state it can observe, where a
// sleep would only guess.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waiters counts the sessions queued (not granted) for the advisory lock id.
func waiters(t testing.TB, conn *pgx.Conn, id int64) int {
	t.Helper()
	var n int
	err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid AND NOT granted`, id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitQueued waits until n sessions are queued on the server for the lock id.
func waitQueued(t testing.TB, dsn string, id int64, n int) {
	t.Helper()
	conn := connect(t, dsn)
	eventually(t, 10*time.Second, fmt.Sprintf("%d sessions queued for lock id %d", n, id), func() bool {
		return waiters(t, conn, id) >= n
	})
}
