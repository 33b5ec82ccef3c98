package pgadvisory_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

func TestBothSchemesOpen(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	for _, scheme := range []string{pgadvisory.Scheme, pgadvisory.SchemeAlias, "PostgreSQL"} {
		u := scheme + strings.TrimPrefix(dsn, "postgres")
		locker, err := lock.Open(ctx, u)
		if err != nil {
			t.Fatalf("lock.Open(%s://...): %v", scheme, err)
		}
		l, err := locker.TryAcquire(ctx, t.Name())
		if err != nil {
			t.Fatalf("%s: TryAcquire: %v", scheme, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := locker.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// The driver's parameters never reach pgx, which would send them to the server
// as settings (and the server would refuse them); the portable ones are taken by
// lock.Open.
func TestDriverParametersAreNotSentToTheServer(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	u := withParam(t, dsn, "max_lock_conns", "3")
	u = withParam(t, u, "locks_per_conn", "100")
	u = withParam(t, u, "fence_sequence", "params_test_fence")
	u = withParam(t, u, "fence_create", "true")
	u = withParam(t, u, "fencing", "true")
	d, err := pgadvisory.OpenForTest(ctx, u)
	if err != nil {
		t.Fatalf("Open with every driver parameter: %v", err)
	}
	_ = d.Close()
	locker, err := lock.Open(ctx, withParam(t, withParam(t, u, "ttl", "5s"), "prefix", "params"))
	if err != nil {
		t.Fatalf("lock.Open with driver and portable parameters: %v", err)
	}
	l, err := locker.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := connect(t, dsn).QueryRow(ctx, `SELECT last_value FROM params_test_fence`).Scan(&seq); err != nil || uint64(seq) != l.Token() {
		t.Errorf("token %d, sequence params_test_fence at %d (%v): fence_sequence was not used", l.Token(), seq, err)
	}
	_ = locker.Close()
}

func TestBadParametersAreRejectedListingTheAccepted(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	cases := map[string]struct{ name, value, want string }{
		"fencing not a bool":     {"fencing", "maybe", "fencing"},
		"fence_create not bool":  {"fence_create", "sometimes", "fence_create"},
		"max_lock_conns too low": {"max_lock_conns", "1", "at least 2"},
		"max_lock_conns not int": {"max_lock_conns", "many", "max_lock_conns"},
		"locks_per_conn zero":    {"locks_per_conn", "0", "positive"},
		"unknown parameter":      {"lock_conns", "4", "max_lock_conns"},
		"portable parameter":     {"ttl", "10s", "lock.Open"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := pgadvisory.OpenForTest(ctx, withParam(t, dsn, c.name, c.value))
			if !errors.Is(err, driver.ErrInvalidURL) {
				t.Fatalf("Open with %s=%s = %v, want ErrInvalidURL", c.name, c.value, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
	// Through lock.Open too, where the portable parameters are fine.
	_, err := lock.Open(ctx, withParam(t, dsn, "lock_conns", "4"))
	if !errors.Is(err, lock.ErrInvalidURL) || !strings.Contains(err.Error(), "max_lock_conns") {
		t.Errorf("lock.Open with an unknown parameter = %v, want ErrInvalidURL listing the accepted ones", err)
	}
}

// pgx's parse and connect errors must not carry the password (pgconn#51 was a
// parse error that printed it), through either entry point.
func TestErrorsNeverShowThePassword(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	srv := passwordServer(t, "locker", "right-password")
	ctx := context.Background()
	host := strings.TrimPrefix(srv.URL(), "postgres://postgres@")
	host = host[:strings.Index(host, "/")]
	cases := map[string]string{
		"wrong password":            "postgres://locker:" + secret + "@" + host + "/postgres?sslmode=disable",
		"wrong password in query":   "postgres://locker@" + host + "/postgres?sslmode=disable&password=" + secret,
		"bad port":                  "postgres://locker:" + secret + "@" + host[:strings.Index(host, ":")] + ":notaport/postgres",
		"bad escape in password":    "postgres://locker:" + secret + "%zz@" + host + "/postgres",
		"bad sslmode":               "postgres://locker:" + secret + "@" + host + "/postgres?sslmode=sometimes",
		"TLS to a plain server":     "postgres://locker:" + secret + "@" + host + "/postgres?sslmode=require",
		"bad driver parameter":      "postgres://locker:" + secret + "@" + host + "/postgres?max_lock_conns=x",
		"unknown server setting":    "postgres://postgres:" + secret + "@" + host + "/postgres?sslmode=disable&no_such_setting=1",
		"sslpassword":               "postgres://locker@" + host + "/postgres?sslmode=disable&sslpassword=" + secret + "&password=" + secret,
		"password with @ and slash": "postgres://locker:" + secret + "@/x@" + host + "/postgres",
	}
	for name, u := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := pgadvisory.OpenForTest(ctx, u)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Pa55") {
				t.Errorf("pgadvisory.Open error shows the password: %v", err)
			}
			_, err = lock.Open(ctx, u)
			if err == nil {
				t.Fatal("lock.Open succeeded")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Pa55") {
				t.Errorf("lock.Open error shows the password: %v", err)
			}
			t.Logf("%v", err)
		})
	}

	// The wrong password is a typed authentication failure, reachable with
	// errors.As.
	_, err := pgadvisory.OpenForTest(ctx, cases["wrong password"])
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Errorf("wrong password: %v, want a PgError with SQLSTATE 28P01 (invalid_password)", err)
	}
	// And the right one works.
	d, err := pgadvisory.OpenForTest(ctx, roleURL(srv, "locker", "right-password"), pgadvisory.WithFencing(false))
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	_ = d.Close()
}
