package redlockdriver

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// Close leaves no goroutine behind, at once, and is bounded, even when a
// server stopped answering (SIGSTOP) while connections to it were being made:
// the server's accept queue is full (tcp-backlog 0 and one connection
// waiting), so new connections hang in their TCP handshake as on a network
// that drops packets, and go-redis dials them in goroutines of its own that
// outlived Close by up to its 5s dial timeout.
func TestCloseLeavesNoGoroutineWithAFrozenServer(t *testing.T) {
	servers := append(testserver.RedisServers(t, 2), testserver.StartRedis(t, "--tcp-backlog", "0"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := admins(t, servers)
	for _, a := range admin {
		if err := a.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	keep := leakcheck.IgnoreCurrent()
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	holder := &driver.Request{Key: "k", Owner: "holder", TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	// Kill the driver's connections to the third server, freeze it, and fill
	// its accept queue, so that the next requests dial new connections, which
	// hang.
	if err := admin[2].Do(ctx, "CLIENT", "KILL", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = servers[2].Resume() }()
	var fill []net.Conn
	defer func() {
		for _, c := range fill {
			_ = c.Close()
		}
	}()
	for {
		c, err := net.DialTimeout("tcp", servers[2].Addr(), 200*time.Millisecond)
		if err != nil {
			break // the queue is full
		}
		fill = append(fill, c)
		if len(fill) > 10 {
			t.Fatal("the frozen server's accept queue does not fill")
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := d.Acquire(ctx, &driver.Request{Key: "k", Owner: "waiter", TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})})
		errc <- err
	}()
	// Requests that dial the frozen server (and time out, leaving the dials).
	for range 3 {
		_, _ = d.TryAcquire(ctx, &driver.Request{Key: "other", Owner: "o", TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})})
	}
	start := time.Now()
	if err := d.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	took := time.Since(start)
	t.Logf("Close with a frozen server took %v", took)
	if took > 2*time.Second {
		t.Errorf("Close with a frozen server took %v, want about a second at most", took)
	}
	if err := <-errc; !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Acquire ended by Close = %v, want ErrClosed", err)
	}
	// leakcheck waits a second: far below the 5s of go-redis's
	// dial timeout, which bounded the goroutines left before.
	if err := leakcheck.Find(keep); err != nil {
		t.Errorf("goroutines outlive Close: %v", err)
	}
}

// Open honours its context's cancellation against servers that accept
// connections but answer nothing (SIGSTOP), although its own bound (ten
// per-server timeouts, 10s here) is far away.
func TestOpenHonoursCancellationOnFrozenServers(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	for _, s := range servers {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Resume() }()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const after = 200 * time.Millisecond
	timer := time.AfterFunc(after, cancel)
	defer timer.Stop()
	start := time.Now()
	_, err := openURL(ctx, redlockURL(servers, "server_timeout=1s"))
	took := time.Since(start)
	t.Logf("Open cancelled after %v returned after %v: %v", after, took, err)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Open cancelled = %v, want context.Canceled", err)
	}
	if took > after+time.Second {
		t.Errorf("Open cancelled after %v took %v", after, took)
	}
}
