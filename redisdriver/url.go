package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

// The URL schemes this package registers; see URL format in the package
// documentation.
const (
	Scheme            = "redis"           // a standalone server
	SchemeTLS         = "rediss"          // a standalone server over TLS
	SchemeUnix        = "redis+unix"      // a standalone server on a unix socket
	SchemeSentinel    = "redis+sentinel"  // the primary that Sentinel names
	SchemeSentinelTLS = "rediss+sentinel" // the same over TLS
	SchemeCluster     = "redis+cluster"   // a Redis Cluster
	SchemeClusterTLS  = "rediss+cluster"  // the same over TLS
)

func init() {
	redisproto.RouteGoRedis() // see Logging in the package documentation
	for scheme := range forms {
		driver.Register(scheme, open)
	}
}

type topology int

const (
	standalone topology = iota
	sentinel
	cluster
)

// A form is how one scheme is parsed: by which go-redis parser, under which of
// its schemes, and with which query parameters.
type form struct {
	topology topology
	goScheme string   // the scheme go-redis's parser expects
	params   []string // the go-redis parameters accepted
}

// The query parameters each go-redis parser understands (go-redis v9.22), less
// those that make no sense for locks. TestAcceptedParamsParse checks them
// against the parsers.
var (
	standaloneParams = redisproto.URLParams
	sentinelParams   = []string{
		"addr", "client_name", "conn_max_idle_time", "conn_max_lifetime", "conn_max_lifetime_jitter",
		"db", "dial_timeout", "dialer_retries", "dialer_retry_timeout", "disableIdentity",
		"identitySuffix", "master_name", "max_active_conns", "max_concurrent_dials",
		"max_idle_conns", "max_retries", "max_retry_backoff", "min_idle_conns",
		"min_retry_backoff", "password", "pool_fifo", "pool_size", "pool_timeout", "protocol",
		"read_timeout", "unstable_resp3", "username", "write_timeout",
	}
	clusterParams = []string{
		"addr", "client_name", "conn_max_idle_time", "conn_max_lifetime", "conn_max_lifetime_jitter",
		"dial_timeout", "dialer_retries", "dialer_retry_timeout", "failing_timeout_seconds",
		"max_active_conns", "max_concurrent_dials", "max_idle_conns", "max_redirects",
		"max_retries", "max_retry_backoff", "min_idle_conns", "min_retry_backoff", "pool_fifo",
		"pool_size", "pool_timeout", "protocol", "read_only", "read_timeout", "route_by_latency",
		"route_randomly", "write_timeout",
	}

	forms = map[string]form{
		Scheme:            {standalone, "redis", standaloneParams},
		SchemeTLS:         {standalone, "rediss", withParams(standaloneParams, "skip_verify")},
		SchemeUnix:        {standalone, "unix", standaloneParams},
		SchemeSentinel:    {sentinel, "redis", sentinelParams},
		SchemeSentinelTLS: {sentinel, "rediss", withParams(sentinelParams, "skip_verify")},
		SchemeCluster:     {cluster, "redis", clusterParams},
		SchemeClusterTLS:  {cluster, "rediss", clusterParams},
	}

	// refusedSentinelParams are go-redis Sentinel parameters that would send
	// the driver's writes to replicas. (In a Cluster, route_* only steer
	// read-only commands, which the driver does not send.)
	refusedSentinelParams = map[string]string{
		"replica_only":              "locks are written on the primary",
		"route_by_latency":          "locks are written on the primary",
		"route_randomly":            "locks are written on the primary",
		"use_disconnected_replicas": "locks are written on the primary",
	}
)

func withParams(base []string, more ...string) []string {
	out := append(append([]string{}, base...), more...)
	sort.Strings(out)
	return out
}

// open is the driver.Opener of every scheme.
func open(ctx context.Context, cfg driver.Config) (driver.Driver, error) {
	client, o, err := newClient(cfg.URL)
	if err != nil {
		return nil, err
	}
	d, err := New(client, WithPrefix(cfg.Prefix), WithFencing(o.fencing), withOwnedClient())
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	// Connect now, so that a wrong password, a missing ACL permission, a TLS
	// failure or a server that cannot be reached fails Open rather than the
	// first lock. go-redis honours ctx's deadline while it dials, shakes hands
	// and waits for the answer, but not its cancellation once connected:
	// closing the client when ctx is cancelled ends the wait.
	stop := context.AfterFunc(ctx, func() { _ = client.Close() })
	err = client.Ping(ctx).Err()
	if !stop() {
		_ = d.Close()
		return nil, fmt.Errorf("redisdriver: connect: %w", context.Cause(ctx))
	}
	if err != nil {
		_ = d.Close()
		return nil, redact(fmt.Errorf("redisdriver: connect: %w", classify(err)), cfg.URL)
	}
	return d, nil
}

// clientOptions are the go-redis options a URL describes, for one of the
// three kinds of client.
type clientOptions struct {
	standalone *redis.Options
	sentinel   *redis.FailoverOptions
	cluster    *redis.ClusterOptions

	fencing bool // this driver's fencing parameter (see WithFencing)
}

// newClient builds the go-redis client a URL describes.
func newClient(u *url.URL) (redis.UniversalClient, clientOptions, error) {
	o, err := parseURL(u)
	if err != nil {
		return nil, o, err
	}
	switch {
	case o.sentinel != nil:
		return redis.NewFailoverClient(o.sentinel), o, nil
	case o.cluster != nil:
		return redis.NewClusterClient(o.cluster), o, nil
	default:
		return redis.NewClient(o.standalone), o, nil
	}
}

// parseURL turns a URL into go-redis options with go-redis's own parsers, after
// checking its scheme and parameters. Context deadlines are always honoured.
func parseURL(u *url.URL) (clientOptions, error) {
	var none clientOptions
	if u == nil {
		return none, fmt.Errorf("%w: redisdriver: nil URL", driver.ErrInvalidURL)
	}
	scheme := strings.ToLower(u.Scheme)
	f, ok := forms[scheme]
	if !ok {
		return none, fmt.Errorf("%w: redisdriver: scheme %q is not one of %s", driver.ErrInvalidURL, scheme, strings.Join(schemes(), ", "))
	}
	fencing, err := checkParams(f, u.Query())
	if err != nil {
		return none, err
	}
	if u.Opaque != "" {
		return none, fmt.Errorf("%w: redisdriver: want %s://host..., not %s:opaque", driver.ErrInvalidURL, scheme, scheme)
	}
	raw := *u
	raw.Scheme = f.goScheme
	if q := u.Query(); q.Has(fencingParam) { // ours: go-redis's parser refuses it
		q.Del(fencingParam)
		raw.RawQuery = q.Encode()
	}
	var o clientOptions
	switch f.topology {
	case sentinel:
		o, err = parseSentinel(u, raw.String())
	case cluster:
		o, err = parseCluster(u, raw.String())
	default:
		o, err = parseStandalone(u, raw.String())
	}
	o.fencing = fencing
	return o, err
}

// fencingParam is this driver's own URL parameter: fencing=false is
// WithFencing(false).
const fencingParam = "fencing"

// parseSentinel reads a Sentinel URL (raw is u in go-redis's scheme).
func parseSentinel(u *url.URL, raw string) (clientOptions, error) {
	o, err := redis.ParseFailoverURL(raw)
	if err != nil {
		return clientOptions{}, invalid(err, u)
	}
	if o.MasterName == "" {
		return clientOptions{}, fmt.Errorf("%w: redisdriver: %s needs master_name=NAME, the primary's name in Sentinel", driver.ErrInvalidURL, strings.ToLower(u.Scheme))
	}
	o.ContextTimeoutEnabled = true
	if !u.Query().Has("dialer_retries") {
		o.DialerRetries = 1
	}
	return clientOptions{sentinel: o}, nil
}

// parseCluster reads a Cluster URL (raw is u in go-redis's scheme).
func parseCluster(u *url.URL, raw string) (clientOptions, error) {
	if p := strings.Trim(u.Path, "/"); p != "" {
		return clientOptions{}, fmt.Errorf("%w: redisdriver: a cluster has only database 0; remove the path %q", driver.ErrInvalidURL, u.Path)
	}
	o, err := redis.ParseClusterURL(raw)
	if err != nil {
		return clientOptions{}, invalid(err, u)
	}
	o.ContextTimeoutEnabled = true
	if !u.Query().Has("dialer_retries") {
		o.DialerRetries = 1
	}
	return clientOptions{cluster: o}, nil
}

// parseStandalone reads the URL of one server, over TCP or a unix socket (raw
// is u in go-redis's scheme).
func parseStandalone(u *url.URL, raw string) (clientOptions, error) {
	if strings.ToLower(u.Scheme) == SchemeUnix && u.Host != "" {
		return clientOptions{}, fmt.Errorf("%w: redisdriver: a unix socket URL has no host: want redis+unix:///path/to/redis.sock", driver.ErrInvalidURL)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return clientOptions{}, invalid(err, u)
	}
	o.ContextTimeoutEnabled = true
	o.DialerRetries = 1 // one attempt: the caller's retry policy decides
	return clientOptions{standalone: o}, nil
}

// invalid is go-redis's parse error for u, without u's passwords.
func invalid(err error, u *url.URL) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // url.Error repeats the whole URL
	}
	return redact(fmt.Errorf("%w: redisdriver: %w", driver.ErrInvalidURL, err), u)
}

// checkParams refuses unknown parameters, listing the accepted ones, and
// those go-redis knows but the driver refuses, saying why. It returns the
// driver's own parameter, fencing (true when not given).
func checkParams(f form, q url.Values) (fencing bool, err error) {
	p := driver.NewParams("redisdriver", q)
	p.Unique = true
	fencing = p.Bool(fencingParam, true)
	p.Refuse("context_timeout_enabled", "is refused: the driver always honours context deadlines")
	if f.topology == sentinel {
		for _, name := range slices.Sorted(maps.Keys(refusedSentinelParams)) {
			p.Refuse(name, "is refused: "+refusedSentinelParams[name])
		}
	}
	p.Accept(f.params...) // go-redis's parser reads them
	return fencing, p.Check()
}

func schemes() []string {
	out := make([]string, 0, len(forms))
	for s := range forms {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// redact removes the URL's secrets (user info, the Sentinel form's password
// parameter) from an error's message, keeping the error for errors.Is and
// errors.As.
func redact(err error, u *url.URL) error {
	return driver.RedactError(err, driver.URLSecrets(u.String())...)
}
