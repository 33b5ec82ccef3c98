package pgadvisory_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// asRole returns dsn for role (trust authentication: no password).
func asRole(t *testing.T, dsn, role string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// A user who may not create the sequence gets an error that says what to run;
// once a privileged user ran it, locking works. Without fencing no sequence is
// needed at all.
func TestFencingWithoutDDLRightsFailsClearlyUntilTheSequenceIsGranted(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	admin := connect(t, dsn)
	role := "locker_without_ddl"
	seq := pgx.Identifier{role + "_fence"}.Sanitize()
	cleanup := func() {
		_, _ = admin.Exec(context.Background(), `DROP SEQUENCE IF EXISTS `+seq)
		_, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	}
	cleanup()
	t.Cleanup(cleanup)
	mustExec(t, admin, `CREATE ROLE `+role+` LOGIN`) // PostgreSQL 15: no CREATE on schema public
	userURL := withParam(t, asRole(t, dsn, role), "prefix", role)

	locker, err := lock.Open(ctx, userURL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	_, err = locker.TryAcquire(ctx, t.Name())
	if !errors.Is(err, pgadvisory.ErrFenceSequence) {
		t.Fatalf("TryAcquire without the right to create the sequence = %v, want ErrFenceSequence", err)
	}
	for _, want := range []string{"permission denied", "CREATE SEQUENCE", "GRANT USAGE ON SEQUENCE", "fencing=false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Logf("%v", err)

	// With fence_create=false a missing sequence is an error without trying.
	noCreate, err := lock.Open(ctx, withParam(t, userURL, "fence_create", "false"))
	if err != nil {
		t.Fatal(err)
	}
	defer noCreate.Close()
	if _, err := noCreate.TryAcquire(ctx, t.Name()); !errors.Is(err, pgadvisory.ErrFenceSequence) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("with fence_create=false and no sequence: %v, want ErrFenceSequence saying it does not exist", err)
	}

	// Without fencing nothing is needed.
	unfenced, err := lock.Open(ctx, withParam(t, userURL, "fencing", "false"))
	if err != nil {
		t.Fatal(err)
	}
	defer unfenced.Close()
	l, err := unfenced.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatalf("TryAcquire without fencing: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A privileged user runs what the message says; then the same Locker works.
	mustExec(t, admin, `CREATE SEQUENCE `+seq+` AS bigint MINVALUE 1 NO CYCLE CACHE 1`)
	mustExec(t, admin, `GRANT USAGE ON SEQUENCE `+seq+` TO `+role)
	l, err = locker.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatalf("TryAcquire once the sequence is granted: %v", err)
	}
	if l.Token() != 1 {
		t.Errorf("first token %d, want 1", l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A sequence that would hand out values out of order is refused.
func TestUnfitFenceSequenceIsRefused(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	admin := connect(t, dsn)
	cases := map[string]struct{ create, drop, want string }{
		"cached":     {`CREATE SEQUENCE unfit_cached CACHE 10`, `DROP SEQUENCE IF EXISTS unfit_cached`, "CACHE 10"},
		"cycling":    {`CREATE SEQUENCE unfit_cycling CYCLE`, `DROP SEQUENCE IF EXISTS unfit_cycling`, "CYCLE"},
		"decreasing": {`CREATE SEQUENCE unfit_decreasing INCREMENT -1`, `DROP SEQUENCE IF EXISTS unfit_decreasing`, "INCREMENT -1"},
		"table":      {`CREATE TABLE unfit_table (x int)`, `DROP TABLE IF EXISTS unfit_table`, "not a sequence"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			mustExec(t, admin, c.drop)
			t.Cleanup(func() { _, _ = admin.Exec(context.Background(), c.drop) })
			mustExec(t, admin, c.create)
			locker, err := lock.Open(ctx, withParam(t, dsn, "fence_sequence", "unfit_"+name))
			if err != nil {
				t.Fatal(err)
			}
			defer locker.Close()
			_, err = locker.TryAcquire(ctx, t.Name())
			if !errors.Is(err, pgadvisory.ErrFenceSequence) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("TryAcquire with a %s sequence = %v, want ErrFenceSequence mentioning %q", name, err, c.want)
			}
		})
	}
}

// Drawing a token in the lock statement uses a transaction id only when
// PostgreSQL logs the sequence ahead, once per 32 values; plain advisory locks
// use none. So locking at a high rate does not hasten xid wraparound.
func TestLockingUsesAboutOneTransactionIDPer32Locks(t *testing.T) {
	const n = 640
	ctx := context.Background()
	srv := testserver.StartPostgres(t, "-c", "autovacuum=off") // nothing else spends xids
	admin := connect(t, srv.URL())
	for _, fencing := range []bool{true, false} {
		d := mustOpen(t, srv.URL(), pgadvisory.WithFencing(fencing))
		locker := lock.New(d)
		// The first lock creates the sequence, which costs an xid of its own.
		l, err := locker.TryAcquire(ctx, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var before, after int64
		if err := admin.QueryRow(ctx, `SELECT txid_current()`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			l, err := locker.TryAcquire(ctx, t.Name())
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := admin.QueryRow(ctx, `SELECT txid_current()`).Scan(&after); err != nil {
			t.Fatal(err)
		}
		_ = locker.Close()
		used := after - before - 1 // txid_current takes one itself
		t.Logf("fencing=%v: %d locks used %d transaction ids", fencing, n, used)
		limit := int64(n/32 + 2)
		if !fencing {
			limit = 0
		}
		if used > limit {
			t.Errorf("fencing=%v: %d locks used %d transaction ids, want at most %d", fencing, n, used, limit)
		}
	}
}
