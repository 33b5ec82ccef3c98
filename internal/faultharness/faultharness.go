// Package faultharness gives a driver's conformance harness the fault hooks over
// servers that internal/testserver started: every networked driver's test wires
// them the same way.
package faultharness

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// With gives the suite's fault properties their hooks over private servers:
// rawURL names them by their addresses, open opens a client from a URL. Freeze
// stops every process of every server (SIGSTOP); restartLosingLocks restarts them
// so that they come back without the locks they held.
func With(h conformance.Harness, servers []*testserver.Server, rawURL string,
	open func(ctx context.Context, rawURL string) (driver.Driver, error),
	restartLosingLocks func(context.Context) error, sessionTimeout time.Duration) conformance.Harness {
	h.URL = rawURL
	h.Servers = nil
	for _, s := range servers {
		h.Servers = append(h.Servers, s.Addr())
	}
	h.NewDriverThrough = func(ctx context.Context, addrs []string) (driver.Driver, error) {
		u := rawURL
		for i, s := range servers {
			u = strings.ReplaceAll(u, s.Addr(), addrs[i])
			u = strings.ReplaceAll(u, url.QueryEscape(s.Addr()), url.QueryEscape(addrs[i]))
		}
		return open(ctx, u)
	}
	h.Freeze = func(context.Context) error {
		for _, s := range servers {
			if err := s.Pause(); err != nil {
				return err
			}
		}
		return nil
	}
	h.Thaw = func(context.Context) error {
		var first error
		for _, s := range servers {
			if err := s.Resume(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	h.RestartLosingLocks = restartLosingLocks
	h.SessionTimeout = sessionTimeout
	return h
}
