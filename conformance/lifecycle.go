package conformance

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/distlock/lock"
)

// cancelBound is how soon after its context ends Acquire must return.
const cancelBound = time.Second

func testCancelledAcquireLeavesNothing(e *env) {
	a, b, c := e.client(), e.client(), e.client()
	l := e.acquire(a, e.key)

	// Cancelled while waiting.
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, e.key)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it wait
	cancelled := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			e.Errorf("Acquire after cancel = %v, want context.Canceled", err)
		}
		if took := time.Since(cancelled); took > cancelBound {
			e.Errorf("Acquire returned %v after cancel, want within %v", took, cancelBound)
		}
	case <-time.After(cancelBound + lossSlack):
		e.Fatal("Acquire did not return after its context was cancelled")
	}

	// Deadline while waiting.
	dctx, dcancel := context.WithTimeout(e.ctx, 150*time.Millisecond)
	start := time.Now()
	_, err := b.Acquire(dctx, e.key)
	dcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		e.Errorf("Acquire past its deadline = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 150*time.Millisecond+cancelBound {
		e.Errorf("Acquire with a 150ms deadline took %v", took)
	}

	// Already cancelled, on a free key: nothing is taken.
	pre, precancel := context.WithCancel(e.ctx)
	precancel()
	if _, err := b.Acquire(pre, e.key+"/free"); !errors.Is(err, context.Canceled) {
		e.Errorf("Acquire with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := b.TryAcquire(pre, e.key+"/free"); !errors.Is(err, context.Canceled) {
		e.Errorf("TryAcquire with a cancelled context = %v, want context.Canceled", err)
	}
	free, err := c.TryAcquire(e.ctx, e.key+"/free")
	if err != nil {
		e.Fatalf("a cancelled Acquire left the free key taken: %v", err)
	}
	e.release(free)

	// The abandoned waiters left no queue entry behind: the next client gets the
	// lock as soon as the holder releases.
	e.release(l)
	l2, err := c.TryAcquire(e.ctx, e.key)
	if err != nil {
		e.Fatalf("TryAcquire right after the release = %v: a cancelled waiter left something behind", err)
	}
	e.release(l2)
}

func testInvalidKeysAreRejected(e *env) {
	a, b := e.client(), e.client()
	bad := map[string]string{
		"empty":          "",
		"too long":       strings.Repeat("k", lock.MaxKeyLen+1),
		"invalid UTF-8":  "bad\xff\xfekey",
		"lone surrogate": "\xed\xa0\x80",
	}
	for name, k := range bad {
		if _, err := a.Acquire(e.ctx, k); !errors.Is(err, lock.ErrInvalidKey) {
			e.Errorf("Acquire(%s key) = %v, want ErrInvalidKey", name, err)
		}
		if _, err := a.TryAcquire(e.ctx, k); !errors.Is(err, lock.ErrInvalidKey) {
			e.Errorf("TryAcquire(%s key) = %v, want ErrInvalidKey", name, err)
		}
		if err := a.Do(e.ctx, k, func(context.Context) error { return nil }); !errors.Is(err, lock.ErrInvalidKey) {
			e.Errorf("Do(%s key) = %v, want ErrInvalidKey", name, err)
		}
	}
	//lint:ignore SA1012 the property is that a nil context is refused
	if _, err := a.Acquire(nil, e.key); !errors.Is(err, lock.ErrInvalidArgument) {
		e.Errorf("Acquire(nil ctx) = %v, want ErrInvalidArgument", err)
	}
	if err := a.Do(e.ctx, e.key, nil); !errors.Is(err, lock.ErrInvalidArgument) {
		e.Errorf("Do(nil fn) = %v, want ErrInvalidArgument", err)
	}
	// Nothing changed: the Locker still works and the key is free.
	l := e.acquire(a, e.key)
	//lint:ignore SA1012 the property is that a nil context is refused
	if err := l.Release(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		e.Errorf("Release(nil ctx) = %v, want ErrInvalidArgument", err)
	}
	//lint:ignore SA1012 the property is that a nil context is refused
	if err := l.Refresh(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		e.Errorf("Refresh(nil ctx) = %v, want ErrInvalidArgument", err)
	}
	e.requireLocked(b, e.key, "a Release with a nil context must not release")
	e.release(l)
}

func testBadOptionsAreRejected(e *env) {
	a, b := e.client(), e.client()
	type bad struct {
		name string
		opts []lock.Option
		want error
	}
	one := func(name string, opt lock.Option, want error) bad { return bad{name, []lock.Option{opt}, want} }
	cases := []bad{
		one("WithTTL(0)", lock.WithTTL(0), lock.ErrInvalidArgument),
		one("WithTTL(-1s)", lock.WithTTL(-time.Second), lock.ErrInvalidArgument),
		one("WithBackoff(zero)", lock.WithBackoff(lock.Backoff{}), lock.ErrInvalidArgument),
		one("WithBackoff(Max<Min)", lock.WithBackoff(lock.Backoff{Min: time.Second, Max: time.Millisecond}), lock.ErrInvalidArgument),
		one("WithPermits(0)", lock.WithPermits(0), lock.ErrInvalidArgument),
		one("WithPermits(-1)", lock.WithPermits(-1), lock.ErrInvalidArgument),
		{"WithShared(true) with WithPermits(2)", []lock.Option{lock.WithShared(true), lock.WithPermits(2)}, lock.ErrInvalidArgument},
		{"WithPermits(1) with WithShared(true)", []lock.Option{lock.WithPermits(1), lock.WithShared(true)}, lock.ErrInvalidArgument},
	}
	if !e.caps.Expiring {
		cases = append(cases, one("WithAutoRefresh(false) on a session-bound driver", lock.WithAutoRefresh(false), lock.ErrUnsupported))
	}
	if !e.caps.Shared {
		cases = append(cases, one("WithShared(true) without shared locks", lock.WithShared(true), lock.ErrUnsupported))
	}
	if !e.caps.Permits {
		cases = append(cases, one("WithPermits(2) without semaphores", lock.WithPermits(2), lock.ErrUnsupported))
	}
	if e.caps.MinTTL > 0 {
		cases = append(cases, one("a TTL below the backend's minimum", lock.WithTTL(e.caps.MinTTL/2), lock.ErrInvalidArgument))
	}
	for _, c := range cases {
		if _, err := a.Acquire(e.ctx, e.key, c.opts...); !errors.Is(err, c.want) {
			e.Errorf("Acquire with %s = %v, want %v", c.name, err, c.want)
		}
		if _, err := a.TryAcquire(e.ctx, e.key, c.opts...); !errors.Is(err, c.want) {
			e.Errorf("TryAcquire with %s = %v, want %v", c.name, err, c.want)
		}
		// As a Locker default it is reported by the first call.
		d, err := e.h.NewDriver(e.ctx)
		if err != nil {
			e.Fatalf("Harness.NewDriver: %v", err)
		}
		lk := lock.New(d, append(append([]lock.Option{lock.WithTTL(e.ttl)}, e.h.Options...), c.opts...)...)
		_, err = lk.TryAcquire(e.ctx, e.key)
		_ = lk.Close()
		if !errors.Is(err, c.want) {
			e.Errorf("TryAcquire on a Locker made with %s = %v, want %v", c.name, err, c.want)
		}
	}
	l, err := b.TryAcquire(e.ctx, e.key)
	if err != nil {
		e.Fatalf("the key is not free after only rejected calls: %v", err)
	}
	e.release(l)
}

func testCloseReleasesLocksAndRejectsLaterCalls(e *env) {
	a, b := e.client(), e.client()
	keys := []string{e.key + "/1", e.key + "/2", e.key + "/3"}
	var held []*lock.Lock
	for _, k := range keys {
		held = append(held, e.acquire(a, k))
	}
	blocker := e.acquire(b, e.key+"/busy")
	waitErr := make(chan error, 1)
	go func() {
		_, err := a.Acquire(e.ctx, e.key+"/busy")
		waitErr <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it wait

	if err := a.Close(); err != nil {
		e.Fatalf("Close: %v", err)
	}
	select {
	case err := <-waitErr:
		if !errors.Is(err, lock.ErrClosed) {
			e.Errorf("Acquire interrupted by Close = %v, want ErrClosed", err)
		}
	case <-time.After(cancelBound):
		e.Fatal("Close did not end a waiting Acquire")
	}
	for _, l := range held {
		if !isClosed(l.Lost()) {
			e.Errorf("Lost() of %q still open after Close", l.Key())
		}
		if err := l.Release(e.ctx); !errors.Is(err, lock.ErrClosed) {
			e.Errorf("Release after Close = %v, want ErrClosed", err)
		}
		if err := l.Refresh(e.ctx); !errors.Is(err, lock.ErrClosed) {
			e.Errorf("Refresh after Close = %v, want ErrClosed", err)
		}
	}
	for _, k := range keys {
		l, err := b.TryAcquire(e.ctx, k)
		if err != nil {
			e.Fatalf("TryAcquire(%q) after the holder's Close: %v (Close did not release)", k, err)
		}
		e.release(l)
	}
	if _, err := a.Acquire(e.ctx, e.key); !errors.Is(err, lock.ErrClosed) {
		e.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if _, err := a.TryAcquire(e.ctx, e.key); !errors.Is(err, lock.ErrClosed) {
		e.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
	}
	if err := a.Do(e.ctx, e.key, func(context.Context) error { return nil }); !errors.Is(err, lock.ErrClosed) {
		e.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		e.Errorf("second Close = %v, want nil", err)
	}
	e.release(blocker)
}
