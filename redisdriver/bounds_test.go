package redisdriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// Open honours its context on a server that accepts connections but answers
// nothing (SIGSTOP): a deadline ends it at the deadline, and a cancellation
// (which go-redis does not watch once connected) at once.
func TestOpenHonoursItsContextOnAFrozenServer(t *testing.T) {
	srv := testserver.StartRedis(t)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()

	const bound = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	start := time.Now()
	_, err := openURL(ctx, srv.URL())
	cancel()
	took := time.Since(start)
	t.Logf("Open with a %v deadline returned after %v: %v", bound, took, err)
	if err == nil {
		t.Fatal("Open of a frozen server succeeded")
	}
	if took > bound+time.Second {
		t.Errorf("Open with a %v deadline took %v", bound, took)
	}

	ctx, cancel = context.WithCancel(context.Background())
	timer := time.AfterFunc(bound, cancel)
	defer timer.Stop()
	start = time.Now()
	_, err = openURL(ctx, srv.URL())
	took = time.Since(start)
	t.Logf("Open cancelled after %v returned after %v: %v", bound, took, err)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Open cancelled = %v, want context.Canceled", err)
	}
	if took > bound+time.Second {
		t.Errorf("Open cancelled after %v took %v (the client's read timeout is 3s)", bound, took)
	}
}

// Wrong or missing credentials fail Open, not the first lock, with the
// server's answer, without the password, and as a permanent error (not
// ErrUnavailable, which package lock would retry).
func TestWrongOrMissingCredentialsFailOpenClearly(t *testing.T) {
	srv := passwordServer(t, "the-right-one")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const secret = "wr0ng-pa55"
	for raw, want := range map[string]string{
		"redis://:" + secret + "@" + srv.Addr() + "/0": "WRONGPASS",
		"redis://" + srv.Addr() + "/0":                 "NOAUTH",
	} {
		_, err := lock.Open(ctx, raw)
		switch {
		case err == nil:
			t.Errorf("Open(%s) succeeded", driver.Redact(raw, secret))
		case !strings.Contains(err.Error(), want):
			t.Errorf("Open(%s) = %v, want the server's %s", driver.Redact(raw, secret), err, want)
		case strings.Contains(err.Error(), secret):
			t.Errorf("Open's error shows the password: %v", err)
		case errors.Is(err, driver.ErrUnavailable):
			t.Errorf("Open(%s) = %v, a permanent error marked unavailable", driver.Redact(raw, secret), err)
		}
	}
}

// Close never waits on a frozen server for much more than a second, whatever the driver is doing on it: holding a
// lock with its subscription up, a waiter queued for the lock, and an
// Acquire stuck in a round trip.
func TestCloseIsBoundedOnAFrozenServer(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	held := &driver.Request{Key: "k", Owner: "holder", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, held); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the driver's subscription", d.subscribed)
	admin := adminClient(t, srv.URL())
	errc := make(chan error, 2)
	go func() {
		_, err := d.Acquire(context.Background(), &driver.Request{Key: "k", Owner: "waiter", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})})
		errc <- err
	}()
	waitQueueLen(t, ctx, admin, d.keys("k").Queue, 1)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	// An Acquire whose request reached the frozen server: it holds one of the
	// pool's connections (the other is the waiter's).
	client := d.client.(*redis.Client)
	inUse := func() uint32 { s := client.PoolStats(); return s.TotalConns - s.IdleConns }
	busy := inUse()
	go func() {
		_, err := d.Acquire(context.Background(), &driver.Request{Key: "other", Owner: "stuck", TTL: time.Second, Lost: driver.LostFunc(func(error) {})})
		errc <- err
	}()
	waitFor(t, ctx, "the Acquire's round trip", func() bool { return inUse() > busy })

	start := time.Now()
	_ = d.Close()
	took := time.Since(start)
	t.Logf("Close on a frozen server took %v", took)
	// About a second, with room for a loaded machine.
	if took > 2*time.Second {
		t.Errorf("Close on a frozen server took %v, want about a second", took)
	}
	for range 2 {
		select {
		case err := <-errc:
			if !errors.Is(err, driver.ErrClosed) {
				t.Errorf("Acquire ended by Close = %v, want ErrClosed", err)
			}
		case <-ctx.Done():
			t.Fatal("an Acquire still blocked after Close returned")
		}
	}
}
