// Package faultproxy puts a TCP proxy between one client and a server so that a
// test can cut that client off silently (a partition: traffic dropped, no reset),
// reset its connections, slow them down and heal the link again. It embeds
// Toxiproxy (github.com/Shopify/toxiproxy/v2) as a library: no toxiproxy server
// process, no HTTP API, nothing printed.
//
// Only test code imports it (through package conformance), so a program that
// imports a driver compiles none of it.
package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy forwards a loopback port to one upstream address. Its methods are safe for
// concurrent use.
type Proxy struct {
	upstream string
	p        *toxiproxy.Proxy

	mu     sync.Mutex
	toxics []string // names of the toxics in place
	closed bool
}

// Start starts a proxy on a free 127.0.0.1 port in front of upstream (host:port).
func Start(upstream string) (*Proxy, error) {
	logger := zerolog.Nop()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), logger)
	p := toxiproxy.NewProxy(server, "faultproxy-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("faultproxy: starting a proxy to %s: %w", upstream, err)
	}
	return &Proxy{upstream: upstream, p: p}, nil
}

// Addr is the proxy's address, to give the client in place of the upstream's.
func (p *Proxy) Addr() string {
	p.p.Lock()
	defer p.p.Unlock()
	return p.p.Listen
}

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Blackhole drops every byte in both directions from now on, without closing or
// resetting anything: the client's connections stay open and hear nothing, and a
// new connection is accepted but hears nothing either, as behind a network that
// silently lost its route. Heal ends it.
func (p *Proxy) Blackhole() error {
	for _, stream := range []string{"upstream", "downstream"} {
		if err := p.add("blackhole_"+stream, "timeout", stream, map[string]any{"timeout": 0}); err != nil {
			return err
		}
	}
	return nil
}

// Latency delays every chunk of data by d in each direction, so a round trip takes
// 2d longer. Heal ends it.
func (p *Proxy) Latency(d time.Duration) error {
	ms := d.Milliseconds()
	for _, stream := range []string{"upstream", "downstream"} {
		if err := p.add("latency_"+stream, "latency", stream, map[string]any{"latency": ms}); err != nil {
			return err
		}
	}
	return nil
}

// Reset closes every connection through the proxy at once, as a crashed router or
// a killed connection tracker would; the client sees its connections end and may
// connect again through the same address.
func (p *Proxy) Reset() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("faultproxy: proxy to %s is closed", p.upstream)
	}
	p.p.Stop() // closes every connection, and the listener
	if err := p.p.Start(); err != nil {
		return fmt.Errorf("faultproxy: listening again after a reset: %w", err)
	}
	return nil
}

// Heal removes every fault. Connections whose traffic was dropped by Blackhole are
// closed (their byte streams lost data, so no protocol could go on over them); the
// client connects again and is heard from then on.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for _, name := range p.toxics {
		if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil && first == nil {
			first = fmt.Errorf("faultproxy: removing %s: %w", name, err)
		}
	}
	p.toxics = nil
	return first
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.p.Stop()
	p.p.Toxics.ResetToxics(context.Background())
	p.toxics = nil
	return nil
}

func (p *Proxy) add(name, typ, stream string, attrs map[string]any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("faultproxy: proxy to %s is closed", p.upstream)
	}
	for _, have := range p.toxics {
		if have == name {
			return nil
		}
	}
	body, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return err
	}
	if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("faultproxy: adding %s: %w", name, err)
	}
	p.toxics = append(p.toxics, name)
	return nil
}
