package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock/driver"
)

// Scheme is the URL scheme of the driver, postgres://...; SchemeAlias,
// postgresql://..., is the same (libpq accepts both).
const (
	Scheme      = "postgres"
	SchemeAlias = "postgresql"
)

func init() {
	driver.Register(Scheme, open)
	driver.Register(SchemeAlias, open)
}

// open is the driver.Opener for postgres URLs; the portable layer has taken its
// own parameters out already.
func open(ctx context.Context, cfg driver.Config) (driver.Driver, error) {
	if cfg.URL == nil {
		return nil, fmt.Errorf("%w: pgadvisory: nil URL", driver.ErrInvalidURL)
	}
	return openURL(ctx, cfg.URL, []Option{WithPrefix(cfg.Prefix)})
}

// acceptedParams lists the parameters a URL may carry, for the error about a
// parameter that neither the driver, pgx nor the server knows.
func acceptedParams() string {
	return "fencing, fence_sequence, fence_create, holders, max_lock_conns, locks_per_conn (this driver); " + strings.Join(driver.PortableParams(), ", ") + " (lock.Open); " +
		"and whatever pgx accepts: libpq connection parameters such as sslmode, pgxpool's pool_* parameters, and PostgreSQL settings sent to the server"
}

func openURL(ctx context.Context, u *url.URL, opts []Option) (*Driver, error) {
	secrets := driver.URLSecrets(u.String())
	fail := func(err error) (*Driver, error) { return nil, driver.RedactError(err, secrets...) }
	if s := strings.ToLower(u.Scheme); s != Scheme && s != SchemeAlias {
		return fail(fmt.Errorf("%w: pgadvisory: scheme %q, want %s:// or %s://", driver.ErrInvalidURL, u.Scheme, Scheme, SchemeAlias))
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fail(fmt.Errorf("%w: pgadvisory: query: %v", driver.ErrInvalidURL, err))
	}
	o, rest, err := readParams(q, defaultOptions().apply(opts))
	if err != nil {
		return fail(err)
	}
	stripped := *u
	stripped.Scheme = Scheme
	stripped.RawQuery = rest.Encode()
	cfg, err := pgxpool.ParseConfig(stripped.String())
	if err != nil {
		return fail(fmt.Errorf("%w: pgadvisory: %w", driver.ErrInvalidURL, err))
	}
	d, err := newDriver(cfg, o)
	if err != nil {
		return fail(err)
	}
	if err := d.warm(ctx); err != nil {
		_ = d.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42704" {
			err = fmt.Errorf("%w: %w; accepted parameters: %s", driver.ErrInvalidURL, err, acceptedParams())
		}
		// A server that cannot be reached (or not in time, or is starting
		// up) is ErrUnavailable; a wrong password, a missing database or
		// permission stays permanent.
		return fail(classify(context.Background(), err))
	}
	return d, nil
}

// readParams reads this driver's parameters from q into o (their values
// override the options given in code) and returns the other parameters, for
// pgx: libpq's, pgxpool's, and settings sent to the server.
func readParams(q url.Values, o options) (options, url.Values, error) {
	p := driver.NewParams("pgadvisory", q)
	p.Unique = true
	o.fencing = p.Bool("fencing", o.fencing)
	if p.Has("fence_sequence") {
		WithFenceSequence(p.String("fence_sequence", ""))(&o)
	}
	o.fenceCreate = p.Bool("fence_create", o.fenceCreate)
	o.holders = p.Bool("holders", o.holders)
	o.maxConns = p.Int("max_lock_conns", o.maxConns, 2, math.MaxInt, "an integer of at least 2")
	o.locksPerConn = p.Int("locks_per_conn", o.locksPerConn, 1, math.MaxInt, "a positive integer")
	if err := p.Err(); err != nil {
		return o, nil, err
	}
	if o.err != nil {
		return o, nil, fmt.Errorf("%w: %w", driver.ErrInvalidURL, o.err)
	}
	return o, p.Rest(), nil
}

// warm opens the first lock connection, which checks the URL, the credentials
// and the server.
func (d *Driver) warm(ctx context.Context) error {
	d.mu.Lock()
	d.creating++
	d.mu.Unlock()
	c, err := d.open(ctx, false)
	if err != nil {
		return err
	}
	d.letGo(c)
	return nil
}
