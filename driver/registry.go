package driver

import (
	"context"
	"net/url"
	"sort"
	"sync"
)

// Config is what lock.Open hands to a driver's Opener.
type Config struct {
	// URL is the connection URL with the portable layer's own query parameters
	// (ttl, auto_refresh, prefix) already removed, so a driver's parser only sees
	// its own. It may carry credentials: never print it unredacted (url.URL's
	// Redacted method).
	URL *url.URL

	// Prefix namespaces everything the driver writes, so it cannot touch user data.
	// Empty means the driver's documented default.
	Prefix string
}

// Opener opens a driver for a URL of a registered scheme.
type Opener func(ctx context.Context, cfg Config) (Driver, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes a URL scheme available to lock.Open. It is meant to be called
// from a driver package's init function. Like sql.Register it panics if the scheme
// is registered twice or the opener is nil, because either is a programming error
// that must not pass silently.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if open == nil {
		panic("distlock/driver: Register opener is nil for scheme " + scheme)
	}
	if scheme == "" {
		panic("distlock/driver: Register with an empty scheme")
	}
	if _, dup := registry[scheme]; dup {
		panic("distlock/driver: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// Lookup returns the opener registered for scheme.
func Lookup(scheme string) (Opener, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	open, ok := registry[scheme]
	return open, ok
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
