package etcddriver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/distlock/lock/driver"
)

// Scheme is the URL scheme of plain-text etcd: etcd://host:2379/prefix.
const Scheme = "etcd"

// SchemeTLS is the URL scheme of etcd over TLS: etcds://host:2379/prefix.
const SchemeTLS = "etcds"

// DefaultPort is the client port used when a host has none.
const DefaultPort = "2379"

// Defaults of the connection parameters dial_timeout, keepalive_time and
// keepalive_timeout.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
)

func init() {
	driver.Register(Scheme, open)
	driver.Register(SchemeTLS, open)
}

// open is the driver.Opener of both schemes.
func open(ctx context.Context, cfg driver.Config) (driver.Driver, error) {
	spec, prefix, err := parseURL(cfg.URL, cfg.Prefix)
	if err != nil {
		return nil, err
	}
	ctx, refused := watchRefusals(ctx, spec.Endpoints, spec.DialTimeout)
	d, err := openClient(ctx, spec, prefix)
	if r := refused(); r != nil && err != nil {
		return nil, fmt.Errorf("%w: etcddriver: %s: every endpoint refused the connection: %w", driver.ErrUnavailable, strings.Join(spec.Endpoints, ","), r)
	}
	return d, err
}

// openClient connects to etcd as spec says, and checks it, within ctx.
func openClient(ctx context.Context, spec *clientv3.ConfigSpec, prefix string) (driver.Driver, error) {
	ccfg, err := clientv3.NewClientConfig(spec, zap.NewNop())
	if err != nil {
		// The TLS files could not be loaded; the error names files, not secrets.
		return nil, fmt.Errorf("%w: etcddriver: %v", driver.ErrInvalidURL, err)
	}
	// A library does not write to the program's stderr: the client's lines go
	// to the Locker's logger, or nowhere (see zapToSlog).
	logs := newLogSink()
	ccfg.Logger = zapToSlog(logs)
	if spec.Secure != nil && spec.Secure.ServerName != "" {
		// gRPC verifies the server's certificate for the dial target's authority
		// and ignores tls.Config.ServerName, where the client library puts it.
		ccfg.DialOptions = append(ccfg.DialOptions, grpc.WithAuthority(spec.Secure.ServerName))
	}
	// Reconnect quickly after a server restart or an outage: the keepalive the
	// driver sends on reconnecting is what notices a server that came back
	// without its data (see watchConnection). gRPC's default waits 1s, then
	// 1.6 times longer after each failure, up to 2 minutes.
	ccfg.DialOptions = append(ccfg.DialOptions, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: reconnectFirst, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMax},
		MinConnectTimeout: spec.DialTimeout,
	}))
	where := strings.Join(spec.Endpoints, ",")
	user := ""
	if spec.Auth != nil {
		user = spec.Auth.Username
	}

	// clientv3.New authenticates under the client's own context, bounded by
	// dial_timeout alone; ending that context when ctx ends makes New honour
	// ctx too. Afterwards the client's context is independent of ctx.
	base, cancelBase := context.WithCancel(context.Background())
	ccfg.Context = base
	stop := context.AfterFunc(ctx, cancelBase)
	c, err := clientv3.New(*ccfg)
	if !stop() {
		// ctx ended while New ran (or just after): the client is unusable.
		if err == nil {
			c.Close()
		}
		cancelBase()
		return nil, fmt.Errorf("etcddriver: %s: %w", where, ctx.Err())
	}
	if err != nil {
		cancelBase()
		switch {
		case errors.Is(err, rpctypes.ErrAuthFailed):
			return nil, fmt.Errorf("etcddriver: %s: authentication as user %q failed (wrong user or password): %w", where, user, err)
		case isContextErr(err):
			return nil, fmt.Errorf("%w: etcddriver: no answer from %s within dial_timeout %v: %w", driver.ErrUnavailable, where, spec.DialTimeout, err)
		}
		return nil, fmt.Errorf("etcddriver: connect to %s: %w", where, err)
	}
	// The client dials in the background; the first requests, checking access
	// and measuring the minimum lease TTL, are what show that etcd answers.
	pctx, cancel := context.WithTimeout(ctx, spec.DialTimeout)
	defer cancel()
	d, err := newDriver(pctx, c, true, []Option{WithPrefix(prefix)})
	if err != nil {
		c.Close()
		cancelBase()
		if pctx.Err() != nil && ctx.Err() == nil {
			// gRPC keeps retrying a failed connection or TLS handshake and
			// does not say why; the caller learns only that etcd did not answer.
			return nil, fmt.Errorf("%w: etcddriver: no answer from %s within dial_timeout %v (is etcd up there, and are the scheme and TLS files right?): %w",
				driver.ErrUnavailable, where, spec.DialTimeout, err)
		}
		if ctx.Err() != nil && isContextErr(err) {
			return nil, fmt.Errorf("etcddriver: %s: %w", where, ctx.Err())
		}
		if transient(err) {
			return nil, fmt.Errorf("%w: etcddriver: %s: %w", driver.ErrUnavailable, where, err)
		}
		return nil, fmt.Errorf("etcddriver: %s: %w", where, err)
	}
	d.closeClient = cancelBase
	d.logs = logs
	return d, nil
}

// The reconnection backoff of a client the driver opens: the first retry after
// reconnectFirst, then 1.6 times longer each time (with 20% jitter), never
// longer than reconnectMax.
const (
	reconnectFirst = 100 * time.Millisecond
	reconnectMax   = time.Second
)

// parseURL turns an etcd or etcds URL into the client library's own declarative
// configuration (the one etcdctl's flags fill) and the key prefix. The portable
// layer has removed its own parameters (and put prefix= in portablePrefix).
func parseURL(u *url.URL, portablePrefix string) (*clientv3.ConfigSpec, string, error) {
	bad := func(format string, args ...any) (*clientv3.ConfigSpec, string, error) {
		return nil, "", fmt.Errorf("%w: etcddriver: "+format, append([]any{driver.ErrInvalidURL}, args...)...)
	}
	if u == nil {
		return bad("nil URL")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != Scheme && scheme != SchemeTLS {
		return bad("scheme %q is neither %s nor %s", u.Scheme, Scheme, SchemeTLS)
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no host: want %s://host:2379[,host2:2379...]/prefix", scheme)
	}
	if u.Fragment != "" {
		return bad("a fragment (#...) means nothing here")
	}
	spec := &clientv3.ConfigSpec{}
	if err := readAuthority(spec, u, scheme); err != nil {
		return bad("%v", err)
	}

	if err := readParams(spec, scheme, u.Query()); err != nil {
		return nil, "", err
	}
	if spec.Secure != nil && (spec.Secure.Cert == "") != (spec.Secure.Key == "") {
		return bad("a client certificate needs both cert and key")
	}

	prefix := strings.TrimRight(u.Path, "/")
	if portablePrefix != "" {
		if prefix != "" {
			return bad("the key prefix is given twice, as the path %q and as prefix=%q: give one", prefix, portablePrefix)
		}
		prefix = "/" + strings.Trim(portablePrefix, "/")
	}
	return spec, prefix, nil
}

// readAuthority reads the endpoints and the credentials into spec.
func readAuthority(spec *clientv3.ConfigSpec, u *url.URL, scheme string) error {
	for _, hp := range strings.Split(u.Host, ",") {
		ep, err := endpoint(hp)
		if err != nil {
			return err
		}
		spec.Endpoints = append(spec.Endpoints, ep)
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		if u.User.Username() == "" || pw == "" {
			return fmt.Errorf("user and password go together: want %s://user:password@host:2379", scheme)
		}
		spec.Auth = &clientv3.AuthConfig{Username: u.User.Username(), Password: pw}
	}
	return nil
}

// readParams reads the query parameters into spec.
func readParams(spec *clientv3.ConfigSpec, scheme string, q url.Values) error {
	p := driver.NewParams("etcddriver", q)
	p.Unique, p.NonEmpty = true, true
	if scheme == SchemeTLS {
		spec.Secure = &clientv3.SecureConfig{
			Cacert:     p.String("cacert", ""),
			Cert:       p.String("cert", ""),
			Key:        p.String("key", ""),
			ServerName: p.String("server_name", ""),
		}
	} else {
		for _, name := range []string{"cacert", "cert", "key", "server_name"} {
			p.Accept(name) // listed as accepted: they are, with etcds://
			p.Refuse(name, "needs TLS: use "+SchemeTLS+"://")
		}
	}
	const positive = "a positive duration, such as 5s"
	spec.DialTimeout = p.Duration("dial_timeout", DefaultDialTimeout, 1, math.MaxInt64, positive)
	spec.KeepAliveTime = p.Duration("keepalive_time", DefaultKeepaliveTime, 1, math.MaxInt64, positive)
	spec.KeepAliveTimeout = p.Duration("keepalive_timeout", DefaultKeepaliveTimeout, 1, math.MaxInt64, positive)
	return p.Check()
}

// endpoint checks one host[:port] of the URL and adds the default port.
func endpoint(hp string) (string, error) {
	if hp == "" {
		return "", fmt.Errorf("empty host in the host list")
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		// No port, or not host:port at all.
		if strings.Contains(strings.Trim(hp, "[]"), ":") && !strings.HasPrefix(hp, "[") {
			return "", fmt.Errorf("host %q: want host:port", hp)
		}
		host, port = strings.Trim(hp, "[]"), DefaultPort
	}
	if host == "" {
		return "", fmt.Errorf("host %q has no name", hp)
	}
	if port == "" {
		return "", fmt.Errorf("host %q has an empty port", hp)
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return "", fmt.Errorf("host %q: port %q is not a number", hp, port)
		}
	}
	return net.JoinHostPort(host, port), nil
}
