package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// recorder grants every lock and records the requests it was asked for.
type recorder struct {
	caps driver.Capabilities
	mu   sync.Mutex
	reqs []driver.Request
}

func (r *recorder) Capabilities() driver.Capabilities { return r.caps }
func (r *recorder) TryAcquire(_ context.Context, req *driver.Request) (driver.Grant, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, *req)
	return driver.Grant{}, nil
}
func (r *recorder) Refresh(context.Context, *driver.Request) error { return nil }
func (r *recorder) Release(context.Context, *driver.Request) error { return nil }
func (r *recorder) Close() error                                   { return nil }

func (r *recorder) asked() []driver.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]driver.Request(nil), r.reqs...)
}

// Bad shapes are refused by the portable layer before any driver call, with
// ErrInvalidArgument for what no driver accepts and ErrUnsupported for what
// this driver's Capabilities do not declare.
func TestBadShapesAreRefusedBeforeTheDriverIsAsked(t *testing.T) {
	ctx := context.Background()
	all := driver.Capabilities{Expiring: true, Shared: true, Permits: true}
	for _, c := range []struct {
		name     string
		caps     driver.Capabilities
		defaults []lock.Option
		opts     []lock.Option
		want     error
	}{
		{"no permits", all, nil, []lock.Option{lock.WithPermits(0)}, lock.ErrInvalidArgument},
		{"negative permits", all, nil, []lock.Option{lock.WithPermits(-3)}, lock.ErrInvalidArgument},
		{"shared semaphore", all, nil, []lock.Option{lock.WithShared(true), lock.WithPermits(3)}, lock.ErrInvalidArgument},
		{"shared single permit", all, nil, []lock.Option{lock.WithPermits(1), lock.WithShared(true)}, lock.ErrInvalidArgument},
		{"shared call on a semaphore Locker", all, []lock.Option{lock.WithPermits(3)}, []lock.Option{lock.WithShared(true)}, lock.ErrInvalidArgument},
		{"semaphore without Permits", driver.Capabilities{Expiring: true, Shared: true}, nil, []lock.Option{lock.WithPermits(2)}, lock.ErrUnsupported},
		{"shared without Shared", driver.Capabilities{Expiring: true, Permits: true}, nil, []lock.Option{lock.WithShared(true)}, lock.ErrUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &recorder{caps: c.caps}
			lk := lock.New(d, c.defaults...)
			defer lk.Close()
			if _, err := lk.TryAcquire(ctx, "k", c.opts...); !errors.Is(err, c.want) {
				t.Errorf("TryAcquire = %v, want %v", err, c.want)
			}
			if _, err := lk.Acquire(ctx, "k", c.opts...); !errors.Is(err, c.want) {
				t.Errorf("Acquire = %v, want %v", err, c.want)
			}
			if err := lk.Do(ctx, "k", func(context.Context) error { return nil }, c.opts...); !errors.Is(err, c.want) {
				t.Errorf("Do = %v, want %v", err, c.want)
			}
			if got := d.asked(); len(got) != 0 {
				t.Errorf("the driver was asked %d times, want never", len(got))
			}
		})
	}
}

// The driver sees the shape asked for: a permit count of at least 2 as
// Request.Permits, one permit as the exclusive lock (on every driver).
func TestShapesReachTheDriverAsAsked(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		caps        driver.Capabilities
		opts        []lock.Option
		shared      bool
		wantPermits int
	}{
		{"exclusive", driver.Capabilities{Expiring: true}, nil, false, 0},
		{"one permit without Permits", driver.Capabilities{Expiring: true}, []lock.Option{lock.WithPermits(1)}, false, 0},
		{"three permits", driver.Capabilities{Expiring: true, Permits: true}, []lock.Option{lock.WithPermits(3)}, false, 3},
		{"shared", driver.Capabilities{Expiring: true, Shared: true}, []lock.Option{lock.WithShared(true)}, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &recorder{caps: c.caps}
			lk := lock.New(d)
			defer lk.Close()
			l, err := lk.TryAcquire(ctx, "k", c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			got := d.asked()
			if len(got) != 1 {
				t.Fatalf("the driver was asked %d times, want once", len(got))
			}
			if got[0].Permits != c.wantPermits || got[0].Shared != c.shared {
				t.Errorf("Request{Permits: %d, Shared: %v}, want {Permits: %d, Shared: %v}", got[0].Permits, got[0].Shared, c.wantPermits, c.shared)
			}
		})
	}
}
