package run

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/soak/check"
)

// Gate wraps a client's driver. It records every successful refresh,
// automatic or not, as a confirmation of the client's current hold (with the
// validity it gave: from the moment the request went out, the TTL less the
// drift), and it lets the nemesis of an in-process soak cut the client off:
// while frozen, every call waits for the thaw or its context, as calls into a
// blackholed connection do.
type Gate struct {
	driver.Driver
	client int
	ttl    time.Duration
	record func(check.Op)
	hold   atomic.Int64
	valid  atomic.Int64 // the validity the last refresh of the hold gave

	mu    sync.Mutex
	open  chan struct{}
	start map[string]time.Time
}

// NewGate wraps d for client, whose locks have the given TTL; record receives
// the refreshes.
func NewGate(d driver.Driver, client int, ttl time.Duration, record func(check.Op)) *Gate {
	o := make(chan struct{})
	close(o)
	return &Gate{Driver: d, client: client, ttl: ttl, record: record, open: o, start: map[string]time.Time{}}
}

// SetHold names the hold that refreshes from now on confirm (a client holds
// one lock at a time).
func (g *Gate) SetHold(h int) { g.hold.Store(int64(h)); g.valid.Store(0) }

// ValidUntil is the end of the validity the current hold's last refresh gave
// (0 before any).
func (g *Gate) ValidUntil() int64 { return g.valid.Load() }

// GrantStart returns the Start of the last grant of key through the gate
// (zero if the driver left it zero): the portable layer measures the
// holder's validity from it.
func (g *Gate) GrantStart(key string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.start[key]
}

func (g *Gate) Freeze() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *Gate) Thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *Gate) wait(ctx context.Context) error {
	g.mu.Lock()
	o := g.open
	g.mu.Unlock()
	select {
	case <-o:
		return nil
	case <-ctx.Done():
		return driver.ErrUnavailable
	}
}

func (g *Gate) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := g.wait(ctx); err != nil {
		return driver.Grant{}, err
	}
	gr, err := g.Driver.TryAcquire(ctx, req)
	if err == nil {
		g.mu.Lock()
		g.start[req.Key] = gr.Start
		g.mu.Unlock()
	}
	return gr, err
}

func (g *Gate) Refresh(ctx context.Context, req *driver.Request) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	// The hold is the one current when the refresh began: one still in
	// flight when its lock was released returns after the next hold began.
	hold := int(g.hold.Load())
	call := time.Now()
	err := g.Driver.Refresh(ctx, req)
	if err == nil {
		valid := call.Add(g.ttl - driver.Drift(g.ttl)).UnixNano()
		if int(g.hold.Load()) == hold {
			g.valid.Store(valid)
		}
		if g.record != nil {
			g.record(check.Op{Kind: check.Refresh, Client: g.client, Hold: hold, Key: req.Key,
				Call: call.UnixNano(), Return: now(), ValidUntil: valid})
		}
	}
	return err
}

func (g *Gate) Release(ctx context.Context, req *driver.Request) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	return g.Driver.Release(ctx, req)
}
