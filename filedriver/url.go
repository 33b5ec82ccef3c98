package filedriver

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/distlock/lock/driver"
)

// Scheme is the URL scheme of the file driver: file:///path/to/dir.
const Scheme = "file"

func init() { driver.Register(Scheme, open) }

// open is the driver.Opener for file URLs.
func open(_ context.Context, cfg driver.Config) (driver.Driver, error) {
	dir, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	return New(dir, WithPrefix(cfg.Prefix))
}

// parseURL returns the directory a file URL names. The portable layer has already
// removed its own parameters, so any query parameter left is unknown.
func parseURL(u *url.URL) (string, error) {
	if u == nil {
		return "", fmt.Errorf("%w: filedriver: nil URL", driver.ErrInvalidURL)
	}
	p := driver.NewParams("filedriver", u.Query())
	if err := p.Check(); err != nil {
		return "", err
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: filedriver: a file URL has no user or password: want file:///path/to/dir", driver.ErrInvalidURL)
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("%w: filedriver: file URL names host %q; file locks are local: want file:///path/to/dir", driver.ErrInvalidURL, u.Host)
	}
	if u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return "", fmt.Errorf("%w: filedriver: file URL needs an absolute path: want file:///path/to/dir", driver.ErrInvalidURL)
	}
	return path.Clean(u.Path), nil
}
