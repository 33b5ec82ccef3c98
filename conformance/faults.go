package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/faultproxy"
)

// Bounds of the fault properties. Like the others they are generous for a loaded
// machine under the race detector, and far below what a hung call or a loss
// learned only at the next refresh produces.
const (
	// callSlack is how long after its context ends a call may still take.
	callSlack = time.Second
	// faultCallTimeout is the context the calls against a frozen server get.
	faultCallTimeout = 300 * time.Millisecond
	// driverCloseBound is how long a driver's own Close may wait on a frozen
	// server after the Locker gave up its releases.
	driverCloseBound = time.Second
	// RestartLossBound is how soon after a backend that lost its locks answers
	// again a holder's Lost must close: the driver's connection saw the crash,
	// so the holder learns it then, not at its next refresh.
	RestartLossBound = 2 * time.Second
	// restartTTL is the TTL of the locks held across a restart: long, so that a
	// loss learned only at the next refresh (TTL/3) misses RestartLossBound.
	restartTTL = 30 * time.Second
)

// figure logs a measured figure in a form scripts can collect:
//
//	figure <what> <backend> <duration>
func (e *env) figure(what string, d time.Duration) {
	e.Helper()
	e.Logf("figure %s %s %v", what, e.backendName(), d.Round(100*time.Microsecond))
}

// backendName is Harness.Name, or the package name of the driver's type.
func (e *env) backendName() string {
	if e.h.Name != "" {
		return e.h.Name
	}
	return e.driverPkg
}

func driverPackage(v any) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.PkgPath() == "" {
		return "unknown"
	}
	p := t.PkgPath()
	return p[strings.LastIndex(p, "/")+1:]
}

// needFreeze skips the property unless the harness can freeze its server.
func (e *env) needFreeze() {
	if e.h.Freeze == nil || e.h.Thaw == nil {
		e.Skip("Harness.Freeze or Harness.Thaw is nil: this harness cannot freeze its server (SIGSTOP)")
	}
}

// freeze freezes the server; the property's cleanup thaws it whatever happens.
func (e *env) freeze() {
	e.Helper()
	e.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.h.Thaw(ctx); err != nil {
			e.Errorf("Harness.Thaw: %v", err)
		}
	})
	if err := e.h.Freeze(e.ctx); err != nil {
		e.Fatalf("Harness.Freeze: %v", err)
	}
}

func (e *env) thaw() {
	e.Helper()
	if err := e.h.Thaw(e.ctx); err != nil {
		e.Fatalf("Harness.Thaw: %v", err)
	}
}

// partitioned is one client behind its own fault proxies.
type partitioned struct {
	lk      *lock.Locker
	proxies []*faultproxy.Proxy
}

func (p *partitioned) each(what string, f func(*faultproxy.Proxy) error) error {
	for _, px := range p.proxies {
		if err := f(px); err != nil {
			return fmt.Errorf("%s the proxy to %s: %w", what, px.Upstream(), err)
		}
	}
	return nil
}

// Blackhole cuts the client off silently; Heal reconnects it.
func (p *partitioned) Blackhole() error { return p.each("blackholing", (*faultproxy.Proxy).Blackhole) }
func (p *partitioned) Heal() error      { return p.each("healing", (*faultproxy.Proxy).Heal) }

// needProxy skips the property unless the harness can route one client through
// addresses of the suite's choosing.
func (e *env) needProxy() {
	if e.h.NewDriverThrough == nil || len(e.h.Servers) == 0 {
		e.Skip("Harness.NewDriverThrough or Harness.Servers is unset: this harness cannot route a client through a fault proxy")
	}
}

// clientThroughProxies opens a client whose every connection goes through a
// fault proxy of its own, closed at the end of the property.
func (e *env) clientThroughProxies(opts ...lock.Option) *partitioned {
	e.Helper()
	p := &partitioned{}
	var addrs []string
	for _, s := range e.h.Servers {
		px, err := faultproxy.Start(s)
		if err != nil {
			e.Fatalf("%v", err)
		}
		e.Cleanup(func() { _ = px.Close() })
		p.proxies = append(p.proxies, px)
		addrs = append(addrs, px.Addr())
	}
	d, err := e.h.NewDriverThrough(e.ctx, addrs)
	if err != nil {
		e.Fatalf("Harness.NewDriverThrough: %v", err)
	}
	p.lk = e.locker(d, opts...)
	return p
}

// lostWatch records when a lock's Lost closes.
type lostWatch struct {
	done chan struct{}
	at   time.Time // set before done closes
}

// watchLost watches l's Lost until it closes or the property ends.
func (e *env) watchLost(l *lock.Lock) *lostWatch {
	w := &lostWatch{done: make(chan struct{})}
	stop := make(chan struct{})
	finished := make(chan struct{})
	e.Cleanup(func() { close(stop); <-finished })
	go func() {
		defer close(finished)
		select {
		case <-l.Lost():
			w.at = time.Now()
			close(w.done)
		case <-stop:
		}
	}()
	return w
}

func (w *lostWatch) closed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// within waits up to d for the watched Lost and tells whether it closed.
func (w *lostWatch) within(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// boundedCtx is the property's context, bounded by d.
func (e *env) boundedCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, d)
}

// releaseAfterFault releases l once the backend is back: the first call after a
// restart may meet a broken connection, which leaves the lock held for the
// Release to be retried. A lock lost in the fault is fine.
func (e *env) releaseAfterFault(l *lock.Lock) {
	e.Helper()
	ctx, cancel := e.boundedCtx(10 * time.Second)
	defer cancel()
	for {
		err := l.Release(ctx)
		if err == nil || errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrLost) {
			return
		}
		if ctx.Err() != nil {
			e.Fatalf("Release after the fault: %v", err)
		}
		pause(ctx, 50*time.Millisecond)
	}
}
