package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// Scheme is the URL scheme of the ZooKeeper driver: zk://host:2181/chroot.
const Scheme = "zk"

func init() { driver.Register(Scheme, open) }

// Defaults of the URL parameters.
const (
	// DefaultSessionTimeout is the session timeout the driver asks for. A crashed
	// holder blocks others for this long; the server may lower or raise it to its
	// own bounds (2 and 20 ticks by default), and the driver uses what it got.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds how long Open waits for the first session.
	DefaultConnectTimeout = 10 * time.Second
)

// urlConfig is what a zk:// URL says.
type urlConfig struct {
	servers        []string // host:port
	chroot         string   // "" or "/a/b"
	user, password string   // digest credentials; user is "" without them
	sessionTimeout time.Duration
	connectTimeout time.Duration
	writeNodes     bool // exclusive=write: exclusive requests make "__WRIT__" nodes
}

// parseURL reads a zk:// URL that url.Parse has already accepted. Its errors
// never contain the URL or its password.
func parseURL(u *url.URL) (urlConfig, error) {
	c := urlConfig{sessionTimeout: DefaultSessionTimeout, connectTimeout: DefaultConnectTimeout}
	bad := func(format string, a ...any) (urlConfig, error) {
		return urlConfig{}, fmt.Errorf("%w: zkdriver: "+format, append([]any{driver.ErrInvalidURL}, a...)...)
	}
	if u == nil {
		return bad("nil URL")
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("want zk://host:port[,host:port...][/chroot]")
	}
	if u.Fragment != "" {
		return bad("a zk URL has no #fragment")
	}
	servers, err := parseServers(u.Host)
	if err != nil {
		return bad("%v", err)
	}
	c.servers = servers
	chroot, err := parseChroot(u.Path)
	if err != nil {
		return bad("%v", err)
	}
	c.chroot = chroot
	if u.User != nil {
		pass, ok := u.User.Password()
		if u.User.Username() == "" || !ok || pass == "" {
			return bad("digest authentication needs both a user and a password: zk://user:password@host:port")
		}
		c.user, c.password = u.User.Username(), pass
	}

	p := driver.NewParams("zkdriver", u.Query())
	c.sessionTimeout = p.Duration("session_timeout", DefaultSessionTimeout, time.Millisecond, 24*time.Hour,
		"a duration between 1ms and 24h, such as 10s")
	c.connectTimeout = p.Duration("connect_timeout", DefaultConnectTimeout, 1, math.MaxInt64,
		"a positive duration, such as 10s")
	switch v := p.String("exclusive", "mutex"); v {
	case "mutex":
	case "write":
		c.writeNodes = true
	default:
		p.Refuse("exclusive", fmt.Sprintf("is %q; want mutex (Curator's InterProcessMutex layout, the default) or write (its InterProcessReadWriteLock's write lock)", v))
	}
	if err := p.Check(); err != nil {
		return urlConfig{}, err
	}
	return c, nil
}

// parseServers checks the URL's host list and gives each server its port.
func parseServers(hosts string) ([]string, error) {
	var servers []string
	for _, s := range strings.Split(hosts, ",") {
		if s == "" {
			return nil, errors.New("empty server in the host list; want zk://host:port[,host:port...]")
		}
		servers = append(servers, s)
	}
	// FormatServers is go-zookeeper's own: it adds the default port 2181.
	servers = zk.FormatServers(servers)
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return nil, fmt.Errorf("server %q is not host:port", s)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("server %q has no valid port", s)
		}
	}
	return servers, nil
}

// parseChroot checks the URL path: "" or "/" for none, otherwise an absolute
// ZooKeeper path of legal names, as the Java client's connect string takes it.
func parseChroot(p string) (string, error) {
	if p == "" || p == "/" {
		return "", nil
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return "", fmt.Errorf("chroot %q must be an absolute path without a trailing slash", p)
	}
	for _, name := range strings.Split(p[1:], "/") {
		if err := checkName(name); err != nil {
			return "", fmt.Errorf("chroot %q: %v", p, err)
		}
	}
	return p, nil
}

// checkName reports why name cannot be a znode name, by ZooKeeper's own rules
// (PathUtils.validatePath).
func checkName(name string) error {
	switch name {
	case "":
		return fmt.Errorf("empty path component")
	case ".", "..":
		return fmt.Errorf("path component %q is not allowed", name)
	}
	for _, r := range name {
		if r == 0 || r <= 0x1f || r >= 0x7f && r <= 0x9f || r >= 0xd800 && r <= 0xf8ff || r >= 0xfff0 || r == '/' {
			return fmt.Errorf("path component %q has a character ZooKeeper refuses (%U)", name, r)
		}
	}
	return nil
}

// open is the driver.Opener for zk:// URLs.
func open(ctx context.Context, cfg driver.Config) (driver.Driver, error) {
	c, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	return dial(ctx, c, cfg.Prefix)
}
