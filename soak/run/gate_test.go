package run

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
	"github.com/distlock/lock/soak/check"
)

// slowRefresh holds every Refresh until release is closed.
type slowRefresh struct {
	driver.Driver
	started chan struct{}
	release chan struct{}
}

func (s slowRefresh) Refresh(ctx context.Context, req *driver.Request) error {
	close(s.started)
	<-s.release
	return s.Driver.Refresh(ctx, req)
}

// A refresh still in flight when its hold ended (its lock released, the next
// hold begun) confirms the hold it began in, not the next one: the soak found
// it credited to the next hold of the same key, as two holders.
func TestRefreshIsCreditedToTheHoldItBeganIn(t *testing.T) {
	d := memdriver.New("gate-" + t.Name())
	defer d.Close()
	slow := slowRefresh{Driver: d, started: make(chan struct{}), release: make(chan struct{})}
	var mu sync.Mutex
	var ops []check.Op
	g := NewGate(slow, 7, time.Second, func(o check.Op) { mu.Lock(); ops = append(ops, o); mu.Unlock() })
	req := &driver.Request{Key: "k", Owner: "o", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	ctx := context.Background()
	g.SetHold(1)
	if _, err := g.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- g.Refresh(ctx, req) }()
	<-slow.started
	g.SetHold(2)
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) != 1 || ops[0].Kind != check.Refresh || ops[0].Hold != 1 {
		t.Fatalf("recorded %+v; want one refresh of hold 1", ops)
	}
	if v := g.ValidUntil(); v != 0 {
		t.Errorf("hold 2's validity is %d from hold 1's refresh; want none", v)
	}
}
