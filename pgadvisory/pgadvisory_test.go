package pgadvisory_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/faultharness"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

func TestConformance(t *testing.T) {
	// A private server, because one property restarts it.
	// With the holders table, which Inspect, List, ForceRelease, Relabel
	// and leader election need.
	srv := testserver.StartPostgres(t)
	dsn := withParam(t, srv.URL(), "holders", "true")
	conformance.Run(t, faultharness.With(conformance.Harness{
		// Gaps the package doc states ("Not seen"), kept visible here until closed.
		MixedPermits: "across clients a semaphore of another n is seen only once every slot it asks for is held",
		MixedShapes:  "across clients a lock and a semaphore of one key never exclude each other",
		// Each client is a Driver with its own pool and sessions, as a separate
		// process would have.
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return pgadvisory.OpenForTest(ctx, dsn) },
		Sever: func(ctx context.Context, d driver.Driver) error {
			return terminate(ctx, dsn, d.(*pgadvisory.Driver))
		},
		SeverCause:     lock.ErrSessionExpired,
		AttemptBound:   pgadvisory.DefaultConnectTimeout, // attempt.go
		RestartBackend: func(context.Context) error { return srv.Restart(true) },
		// The server closes the sessions as it goes down: the driver sees
		// them end before it can see the new start time.
		RestartCause: lock.ErrSessionExpired,
		// The refresh's context ends at the validity deadline, and the driver
		// gives up a session that does not answer only a second after that:
		// the deadline tells first.
		PartitionCause: lock.ErrExpired,
	}, []*testserver.Server{srv}, dsn,
		func(ctx context.Context, u string) (driver.Driver, error) { return pgadvisory.OpenForTest(ctx, u) },
		// Session locks never outlive a restart, data kept or not.
		func(context.Context) error { return srv.Restart(true) }, 0))
}

// Without fencing the driver needs no sequence, and Token must refuse. This
// run is also the default configuration's, without the holders table: the
// driver is shown to the suite without the operator interfaces, whose
// properties (run with holders in TestConformance) need the table (see
// TestWithoutHoldersTable for what the driver does without it).
func TestConformanceWithoutFencing(t *testing.T) {
	dsn := withParam(t, testserver.Postgres(t), "fencing", "false")
	conformance.Run(t, conformance.Harness{
		// Gaps the package doc states ("Not seen"), kept visible here until closed.
		MixedPermits: "across clients a semaphore of another n is seen only once every slot it asks for is held",
		MixedShapes:  "across clients a lock and a semaphore of one key never exclude each other",
		NewDriver: func(ctx context.Context) (driver.Driver, error) {
			d, err := pgadvisory.OpenForTest(ctx, dsn)
			if err != nil {
				return nil, err
			}
			return withoutHolders{d, d}, nil
		},
		Sever: func(ctx context.Context, d driver.Driver) error {
			return terminate(ctx, dsn, d.(withoutHolders).d)
		},
		SeverCause: lock.ErrSessionExpired,
	})
}

// withoutHolders shows a Driver without its operator interfaces.
type withoutHolders struct {
	basicDriver
	d *pgadvisory.Driver
}

type basicDriver interface {
	driver.Driver
	driver.Acquirer
	driver.SetAcquirer
	driver.BatchRefresher
}

// terminate ends every session of d on the server with pg_terminate_backend, and
// returns once they are gone, as an operator or a crash of d's process would.
func terminate(ctx context.Context, dsn string, d *pgadvisory.Driver) error {
	conn, err := pgx.Connect(ctx, plainURL(dsn))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE application_name = $1`,
		d.ApplicationName()).Scan(&n)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no session has application_name %q", d.ApplicationName())
	}
	return nil
}

// withParam returns rawURL with the query parameter name set to value.
func withParam(t testing.TB, rawURL, name, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("test server URL: %v", err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// withoutParam returns rawURL without the query parameter name.
func withoutParam(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Del(name)
	u.RawQuery = q.Encode()
	return u.String()
}

// plainURL is dsn without the driver's parameters, for a plain pgx connection.
func plainURL(dsn string) string {
	return withoutParam(withoutParam(dsn, "fencing"), "holders")
}
