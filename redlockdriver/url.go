package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

// Scheme is the URL scheme this package registers; see URL format in the
// package documentation.
const Scheme = "redlock"

func init() {
	redisproto.RouteGoRedis() // see Logging in the package documentation
	driver.Register(Scheme, open)
}

// The parameters of each server URL in a redlock URL (go-redis v9.22's
// ParseURL parameters, less context_timeout_enabled: the driver always honours
// deadlines).
var (
	serverParams    = redisproto.URLParams
	serverParamsTLS = append(slices.Clone(serverParams), "skip_verify")
)

// openRounds bounds Open's connection check, in per-server timeouts: enough
// for a connection, a TLS handshake and a PING, while a server that accepts
// connections but never answers cannot hold Open (or, through its worker,
// Close) for long.
const openRounds = 10

// config is what a redlock URL describes.
type config struct {
	servers []*redis.Options
	names   []string // redacted server URLs, for errors
	timeout time.Duration
}

// open is the driver.Opener of the redlock scheme.
func open(ctx context.Context, cfg driver.Config) (driver.Driver, error) {
	c, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	clients := make([]redis.UniversalClient, len(c.servers))
	for i, o := range c.servers {
		clients[i] = redis.NewClient(o)
	}
	d, err := New(clients, WithPrefix(cfg.Prefix), WithServerTimeout(c.timeout), withOwnedClients())
	if err != nil {
		for _, cl := range clients {
			_ = cl.Close()
		}
		return nil, fmt.Errorf("%w: %w", driver.ErrInvalidURL, err)
	}
	if err := d.check(ctx, c.names); err != nil {
		_ = d.close(0) // nothing is held yet: cut off the checks still in flight
		return nil, err
	}
	return d, nil
}

// check connects to every server at once. A server that refuses (a wrong
// password, a TLS failure, an ACL) fails Open: that is configuration, not an
// outage. Servers that cannot be reached are tolerated, as long as a majority
// answers.
func (d *Driver) check(ctx context.Context, names []string) error {
	start := time.Now()
	dl := start.Add(openRounds * d.timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	r := d.send(opPing, dl, 1, func(int) ([]string, []any) { return nil, nil })
	errs := make([]error, len(d.servers))
	for i := range errs {
		errs[i] = errTimeout
	}
	answered := 0
	for {
		rep, ok := r.nextUntil(ctx.Done())
		if err := ctx.Err(); err != nil {
			r.stop()
			return fmt.Errorf("redlockdriver: connect: %w", context.Cause(ctx))
		}
		if !ok {
			break
		}
		errs[rep.server] = rep.err
		if rep.err == nil {
			answered++
		}
	}
	var why []string
	var failed []error
	for i, err := range errs {
		if err == nil {
			continue
		}
		e := fmt.Errorf("server %d (%s): %w", i+1, names[i], err)
		if !unreachable(err) {
			return fmt.Errorf("redlockdriver: connect: %w", e)
		}
		why = append(why, e.Error())
		failed = append(failed, e)
	}
	if answered < d.quorum {
		// Every failure was an outage (refused, unreachable, silent), which
		// may pass: unavailable, with each server's error reachable by
		// errors.Is (syscall.ECONNREFUSED for a server where nothing
		// listens). A refusal is known at once, so this comes as soon as
		// the servers that answer do, not at the end of the rounds.
		return fmt.Errorf("%w: %w: connect: %d of %d servers answered, %d needed: %s%w", driver.ErrUnavailable, ErrNoQuorum,
			answered, len(d.servers), d.quorum, strings.Join(why, "; "), wrapOnly(failed))
	}
	// Read each server's run_id, so that the first locks know which process
	// granted them even on a server that answers late (see identities). A
	// server that does not tell (an ACL without INFO) is checked by key alone.
	up := make([]bool, len(d.servers))
	for i, err := range errs {
		up[i] = err == nil
	}
	d.identities(up, dl, ctx.Done())
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlockdriver: connect: %w", context.Cause(ctx))
	}
	return nil
}

// unreachable reports whether err says the server could not be reached (an
// outage Redlock tolerates), rather than that it refused us.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, errTimeout) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || (errors.As(err, &ne) && ne.Timeout())
}

// parseURL reads a redlock URL: its server parameters with go-redis's own
// parser, after checking every parameter at both levels.
func parseURL(u *url.URL) (config, error) {
	var c config
	if u == nil {
		return c, fmt.Errorf("%w: redlockdriver: nil URL", driver.ErrInvalidURL)
	}
	if s := strings.ToLower(u.Scheme); s != Scheme {
		return c, fmt.Errorf("%w: redlockdriver: scheme %q is not %s", driver.ErrInvalidURL, s, Scheme)
	}
	if u.Opaque != "" || u.Host != "" || u.User != nil || strings.Trim(u.Path, "/") != "" {
		return c, fmt.Errorf("%w: redlockdriver: the servers go in server parameters: want redlock://?server=redis://host1:6379&server=redis://host2:6379&server=redis://host3:6379", driver.ErrInvalidURL)
	}
	p := driver.NewParams("redlockdriver", u.Query())
	p.Unique = true // for server_timeout; server is read with All
	raw := p.All("server")
	c.timeout = p.Duration("server_timeout", DefaultServerTimeout, 1, math.MaxInt64, "a positive duration, such as 50ms")
	if err := p.Check(); err != nil {
		return c, err
	}
	if len(raw) < MinServers {
		return c, fmt.Errorf("%w: redlockdriver: %d servers given, Redlock needs at least %d: redlock://?server=redis://host1:6379&server=redis://host2:6379&server=redis://host3:6379",
			driver.ErrInvalidURL, len(raw), MinServers)
	}
	seen := map[string]int{}
	for i, s := range raw {
		o, name, err := parseServer(i+1, s)
		if err != nil {
			return c, err
		}
		key := fmt.Sprintf("%s/%d", o.Addr, o.DB)
		if j, dup := seen[key]; dup {
			return c, fmt.Errorf("%w: redlockdriver: servers %d and %d are the same server %s; Redlock needs independent servers", driver.ErrInvalidURL, j+1, i+1, key)
		}
		seen[key] = i
		c.servers = append(c.servers, o)
		c.names = append(c.names, name)
	}
	return c, nil
}

// parseServer parses server n's URL with go-redis's parser, after checking its
// parameters, and sets what the driver needs. name is the URL with its password
// (and only its password) replaced, for messages; errors never contain the
// password.
func parseServer(n int, raw string) (*redis.Options, string, error) {
	bad := func(name string, err error) (*redis.Options, string, error) {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password and all
		}
		return nil, name, fmt.Errorf("%w: redlockdriver: server %d (%s): %w", driver.ErrInvalidURL, n, name, redactErr(err, raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad(driver.Redact(raw, driver.URLSecrets(raw)...), err)
	}
	name := u.Redacted()
	p := driver.NewParams(fmt.Sprintf("redlockdriver: server %d (%s)", n, name), u.Query())
	switch strings.ToLower(u.Scheme) {
	case "redis":
		p.Accept(serverParams...)
	case "rediss":
		p.Accept(serverParamsTLS...)
	default:
		return bad(name, fmt.Errorf("scheme %q is not redis or rediss", u.Scheme))
	}
	if err := p.Check(); err != nil {
		return nil, name, err
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return bad(name, err)
	}
	o.ContextTimeoutEnabled = true
	// A round is the unit of retry: a retry inside the per-server timeout (of
	// a command, or of a dial, which go-redis retries five times 100ms apart)
	// would only hide why a server did not answer.
	if !u.Query().Has("max_retries") {
		o.MaxRetries = -1
	}
	o.DialerRetries = 1
	return o, name, nil
}

// redactErr removes a server URL's secrets from an error's message, keeping
// the error for errors.Is and errors.As.
func redactErr(err error, raw string) error {
	return driver.RedactError(err, driver.URLSecrets(raw)...)
}
