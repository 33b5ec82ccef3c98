package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
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

// Open returns a Driver for a postgres:// or postgresql:// URL (see URL format
// in the package documentation), without the portable parameters of
// lock.Open. It opens the first lock session, within ctx and the connect
// timeout (connect_timeout, default 10s) for each step (dial, TLS,
// authentication, session setup), so a wrong address, password or parameter is
// reported here: an unreachable server as driver.ErrUnavailable, a refused
// login or unknown database as a permanent error. Options given here are
// overridden by the URL's parameters. No error contains the URL's password.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL
		}
		return nil, driver.RedactError(fmt.Errorf("%w: pgadvisory: %s", driver.ErrInvalidURL, err.Error()), rawSecrets(rawURL)...)
	}
	return openURL(ctx, u, opts)
}

// driverParams are the query parameters this driver reads; every other one goes
// to pgxpool.ParseConfig.
var driverParams = []string{"fence_create", "fence_sequence", "fencing", "locks_per_conn", "max_lock_conns"}

// portableParams belong to lock.Open, which removes them before a driver sees
// the URL.
var portableParams = []string{"auto_refresh", "close_timeout", "open_timeout", "prefix", "ttl"}

func acceptedParams() string {
	return strings.Join(driverParams, ", ") + " (this driver); ttl, auto_refresh, prefix, open_timeout, close_timeout (lock.Open); " +
		"and whatever pgx accepts: libpq connection parameters such as sslmode, pgxpool's pool_* parameters, and PostgreSQL settings sent to the server"
}

func openURL(ctx context.Context, u *url.URL, opts []Option) (*Driver, error) {
	secrets := urlSecrets(u)
	fail := func(err error) (*Driver, error) { return nil, driver.RedactError(err, secrets...) }
	if s := strings.ToLower(u.Scheme); s != Scheme && s != SchemeAlias {
		return fail(fmt.Errorf("%w: pgadvisory: scheme %q, want %s:// or %s://", driver.ErrInvalidURL, u.Scheme, Scheme, SchemeAlias))
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fail(fmt.Errorf("%w: pgadvisory: query: %v", driver.ErrInvalidURL, err))
	}
	for _, p := range portableParams {
		if q.Has(p) {
			return fail(fmt.Errorf("%w: pgadvisory: %s is a parameter of lock.Open, not of pgadvisory.Open (use options)", driver.ErrInvalidURL, p))
		}
	}
	urlOpts, err := driverOptions(q)
	if err != nil {
		return fail(err)
	}
	o := defaultOptions().apply(opts).apply(urlOpts)
	if o.err != nil {
		return fail(fmt.Errorf("%w: %w", driver.ErrInvalidURL, o.err))
	}
	stripped := *u
	stripped.Scheme = Scheme
	stripped.RawQuery = q.Encode()
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

// driverOptions takes this driver's parameters out of q.
func driverOptions(q url.Values) ([]Option, error) {
	var opts []Option
	bad := func(name, val, want string) error {
		return fmt.Errorf("%w: pgadvisory: %s=%q: want %s", driver.ErrInvalidURL, name, val, want)
	}
	for _, name := range driverParams {
		vals, ok := q[name]
		if !ok {
			continue
		}
		q.Del(name)
		if len(vals) != 1 {
			return nil, fmt.Errorf("%w: pgadvisory: %s given %d times", driver.ErrInvalidURL, name, len(vals))
		}
		v := vals[0]
		switch name {
		case "fencing", "fence_create":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, bad(name, v, "true or false")
			}
			if name == "fencing" {
				opts = append(opts, WithFencing(b))
			} else {
				opts = append(opts, WithFenceCreate(b))
			}
		case "fence_sequence":
			opts = append(opts, WithFenceSequence(v))
		case "max_lock_conns":
			n, err := strconv.Atoi(v)
			if err != nil || n < 2 {
				return nil, bad(name, v, "an integer of at least 2")
			}
			opts = append(opts, WithMaxConns(n))
		case "locks_per_conn":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, bad(name, v, "a positive integer")
			}
			opts = append(opts, WithLocksPerConn(n))
		}
	}
	return opts, nil
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

// urlSecrets returns the password of u and the values of its secret parameters,
// in the forms they may take in a message.
func urlSecrets(u *url.URL) []string {
	var out []string
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	if q, err := url.ParseQuery(u.RawQuery); err == nil {
		for k, vs := range q {
			if isSecretParam(k) {
				for _, v := range vs {
					out = append(out, v, url.QueryEscape(v))
				}
			}
		}
	}
	return out
}

// rawSecrets finds a password in a URL that does not parse: whatever stands
// between the first ":" after "//" and the last "@" before the path, and secret
// parameter values.
func rawSecrets(raw string) []string {
	var out []string
	rest := raw
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if c := strings.Index(rest[:at], ":"); c >= 0 {
			p := rest[:at][c+1:]
			out = append(out, p)
			if un, err := url.PathUnescape(p); err == nil {
				out = append(out, un)
			}
		}
	}
	if i := strings.Index(raw, "?"); i >= 0 {
		for _, kv := range strings.Split(raw[i+1:], "&") {
			if k, v, ok := strings.Cut(kv, "="); ok && isSecretParam(k) {
				out = append(out, v)
			}
		}
	}
	return out
}

func isSecretParam(name string) bool {
	switch strings.ToLower(name) {
	case "password", "sslpassword":
		return true
	}
	return false
}
