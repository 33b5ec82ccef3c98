package run

import (
	"context"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// Gate wraps a driver so the nemesis can cut one client off: while frozen,
// every call waits for the thaw or its context, as calls into a blackholed
// connection do.
type Gate struct {
	driver.Driver
	mu    sync.Mutex
	open  chan struct{}
	start map[string]time.Time
}

// GrantStart returns the Start of the last grant of key through the gate
// (zero if the driver left it zero): the portable layer measures the
// holder's validity from it.
func (g *Gate) GrantStart(key string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.start[key]
}

func NewGate(d driver.Driver) *Gate {
	o := make(chan struct{})
	close(o)
	return &Gate{Driver: d, open: o, start: map[string]time.Time{}}
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
	return g.Driver.Refresh(ctx, req)
}

func (g *Gate) Release(ctx context.Context, req *driver.Request) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	return g.Driver.Release(ctx, req)
}
