package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
)

// Close while many goroutines hold, wait and refresh: every call ends with success
// or ErrClosed, every held lock is released, and no goroutine is left (TestMain
// runs leakcheck).
func TestCloseUnderLoadEndsEveryCallAndReleasesEverything(t *testing.T) {
	ctx := context.Background()
	name := t.Name()
	lk := lock.New(memdriver.New(name), lock.WithTTL(5*time.Second))
	other := lock.New(memdriver.New(name))
	defer other.Close()

	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	started := make(chan struct{}, n)
	var holding atomic.Int64 // goroutines holding a lock until Close takes it
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Half the goroutines contend for a few keys, half hold their own.
			key := fmt.Sprintf("own/%d", i)
			if i%2 == 0 {
				key = fmt.Sprintf("shared/%d", i%5)
			}
			started <- struct{}{}
			for {
				l, err := lk.Acquire(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if err := l.Refresh(ctx); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 {
					// Keep holding until Close takes it away.
					holding.Add(1)
					<-l.Lost()
					errs <- l.Release(ctx)
					return
				}
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	for i := 0; i < n; i++ {
		<-started
	}
	// The load runs: every goroutine with a key of its own that keeps it (i%6
	// == 3) holds it, while the others go on acquiring and releasing.
	owners := int64(0)
	for i := 0; i < n; i++ {
		if i%6 == 3 {
			owners++
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for holding.Load() < owners {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d holders got their own keys within 10s", holding.Load(), owners)
		}
		time.Sleep(time.Millisecond)
	}
	if err := lk.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("a call interrupted by Close returned %v, want ErrClosed", err)
		}
	}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("own/%d", i)
		if i%2 == 0 {
			key = fmt.Sprintf("shared/%d", i%5)
		}
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("key %q still held after Close: %v", key, err)
		}
		_ = l.Release(ctx)
	}
}

// valueSpy passes through to a driver and records the value of spyKey in the
// context of each blocking Acquire.
type valueSpy struct {
	driver.Driver
	seen chan any
}

type spyKey struct{}

func (s valueSpy) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	s.seen <- ctx.Value(spyKey{})
	return s.Driver.(driver.Acquirer).Acquire(ctx, req)
}

// A waiting Acquire ends with ErrClosed when the Locker closes, whether the
// caller's context can be cancelled or not, and the driver sees the caller's
// context values either way.
func TestCloseInterruptsWaitWithCallersValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"cancellable", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancel := tc.ctx()
			defer cancel()
			ctx := context.WithValue(parent, spyKey{}, "caller's value")
			name := t.Name()
			holder := lock.New(memdriver.New(name))
			defer holder.Close()
			held, err := holder.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(ctx)

			spy := valueSpy{Driver: memdriver.New(name), seen: make(chan any, 1)}
			lk := lock.New(spy)
			errc := make(chan error, 1)
			go func() {
				_, err := lk.Acquire(ctx, "k")
				errc <- err
			}()
			if v := <-spy.seen; v != "caller's value" {
				t.Errorf("driver saw value %v, want the caller's", v)
			}
			if err := lk.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; !errors.Is(err, lock.ErrClosed) {
				t.Fatalf("Acquire interrupted by Close returned %v, want ErrClosed", err)
			}
		})
	}
}

// closeRace runs a call's backend work (Refresh, or Relabel for Proclaim) at
// the one moment where Close's own release makes the backend answer "not
// held": after Close released the lock and before it closes the driver.
type closeRace struct {
	*memdriver.Driver
	armed                      atomic.Bool // calls before it is set pass through (Campaign's own Relabel)
	inCall, released, answered chan struct{}
}

func newCloseRace(name string) *closeRace {
	return &closeRace{Driver: memdriver.New(name), inCall: make(chan struct{}), released: make(chan struct{}), answered: make(chan struct{})}
}

// overtaken runs call once Close has released the lock, when armed.
func (d *closeRace) overtaken(call func() error) error {
	if !d.armed.Load() {
		return call()
	}
	close(d.inCall)
	<-d.released
	defer close(d.answered)
	return call()
}

func (d *closeRace) Refresh(ctx context.Context, req *driver.Request) error {
	return d.overtaken(func() error { return d.Driver.Refresh(ctx, req) })
}

func (d *closeRace) Relabel(ctx context.Context, req *driver.Request, label string) error {
	return d.overtaken(func() error { return d.Driver.Relabel(ctx, req, label) })
}

func (d *closeRace) Release(ctx context.Context, req *driver.Request) error {
	defer close(d.released) // the test holds one lock, released once, by Close
	return d.Driver.Release(ctx, req)
}

func (d *closeRace) Close() error {
	<-d.answered
	return d.Driver.Close()
}

// A Refresh or Proclaim that Close overtakes reports ErrClosed, as every call
// the Locker's Close ends does, not a lost lock: the backend's "not held" is
// Close's own release.
func TestCallsOvertakenByCloseReportErrClosedNotALoss(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(lk *lock.Locker) (func() error, error)
	}{
		{"Refresh", func(lk *lock.Locker) (func() error, error) {
			l, err := lk.Acquire(ctx, "k")
			if err != nil {
				return nil, err
			}
			return func() error { return l.Refresh(ctx) }, nil
		}},
		{"Proclaim", func(lk *lock.Locker) (func() error, error) {
			ld, err := lk.Campaign(ctx, "k", "first")
			if err != nil {
				return nil, err
			}
			return func() error { return ld.Proclaim(ctx, "second") }, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newCloseRace(t.Name())
			// A TTL long enough that no automatic refresh comes in the test.
			lk := lock.New(d, lock.WithTTL(time.Hour))
			call, err := tc.call(lk)
			if err != nil {
				t.Fatal(err)
			}
			d.armed.Store(true)
			answered := make(chan error, 1)
			go func() { answered <- call() }()
			<-d.inCall
			if err := lk.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-answered; !errors.Is(err, lock.ErrClosed) || errors.Is(err, lock.ErrLost) {
				t.Errorf("%s overtaken by Close = %v, want ErrClosed and not ErrLost", tc.name, err)
			}
		})
	}
}
