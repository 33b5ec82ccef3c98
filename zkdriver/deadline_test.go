package zkdriver_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// closeBound is what the driver promises for Close against a server that
// answers nothing: about a second (go-zookeeper's own Close waits up to a
// second for the answer to its close request when it is reconnecting), plus
// slack for a loaded machine.
const closeBound = 1500 * time.Millisecond

// openSlack is how soon after its context ends Open returns against a server
// that answers nothing: at once, plus slack for a loaded machine.
const openSlack = 500 * time.Millisecond

// driverGoroutines returns the goroutines that run code of the driver or of
// go-zookeeper, by goroutine id.
func driverGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/go-zookeeper/zk.") || strings.Contains(g, "github.com/distlock/lock/zkdriver.") {
			if f := strings.Fields(g); len(f) > 1 {
				out[f[1]] = g
			}
		}
	}
	return out
}

// noneLeft fails t if a goroutine of the driver or go-zookeeper runs that did
// not run when before was taken. The driver waits for each of its goroutines
// to signal that it is done, so all that may remain is a goroutine running its
// last instructions after that signal: noneLeft gives them a quarter of a
// second (leakcheck waits longer), far below the seconds a goroutine left
// waiting on a frozen server would take.
func noneLeft(t *testing.T, before map[string]string, after string) {
	t.Helper()
	deadline := time.Now().Add(250 * time.Millisecond)
	for {
		var left []string
		for id, g := range driverGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, g := range left {
				t.Errorf("a goroutine outlived %s:\n%s", after, g)
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Open against a frozen server (it accepts the TCP connection, as the kernel
// does for a stopped process, and never answers the handshake) returns when
// its context ends, with the context's error, and leaves no goroutine behind.
// go-zookeeper alone would keep waiting for the handshake for ten times two
// thirds of the session timeout (66s with the default 10s), and its Close a
// second more.
func TestOpenOnAFrozenServerEndsWithItsContext(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	before := driverGoroutines()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()

	const limit = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	d, err := openDriver(ctx, srv.URL())
	took := time.Since(start)
	if err == nil {
		d.Close()
		t.Fatal("Open against a frozen server succeeded")
	}
	t.Logf("Open returned %v after it began (context %v): %v", took.Round(time.Millisecond), limit, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open = %v, want the context's error", err)
	}
	if took > limit+openSlack {
		t.Errorf("Open returned %v after its %v context began, want within %v of its end", took, limit, openSlack)
	}
	noneLeft(t, before, "the failed Open")
}

// Close against a frozen server gives up the graceful session close after
// about a second and closes the connection, whatever go-zookeeper is doing:
// waiting for answers on an established connection, or for the handshake of a
// reconnection. No goroutine outlives it. Calls made meanwhile end with their
// context.
func TestCloseOnAFrozenServerIsBounded(t *testing.T) {
	srv := testserver.StartZooKeeper(t)

	t.Run("Connected", func(t *testing.T) {
		before := driverGoroutines()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := openDriver(ctx, srv.URL()+"?session_timeout=20s")
		if err != nil {
			t.Fatal(err)
		}
		held := &driver.Request{Key: "held", Owner: "a", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, held); err != nil {
			t.Fatal(err)
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Resume() }()

		// Every call ends with its context (go-zookeeper would wait until it
		// drops the connection, two thirds of the session timeout).
		calls := map[string]func(context.Context) error{
			"TryAcquire": func(ctx context.Context) error {
				_, err := d.TryAcquire(ctx, &driver.Request{Key: "other", Owner: "b", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})})
				return err
			},
			"Acquire": func(ctx context.Context) error {
				_, err := d.Acquire(ctx, &driver.Request{Key: "other", Owner: "c", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})})
				return err
			},
			"Refresh": func(ctx context.Context) error { return d.Refresh(ctx, held) },
			"Release": func(ctx context.Context) error { return d.Release(ctx, held) },
		}
		for name, call := range calls {
			const limit = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a frozen server = %v, want the context's error", name, err)
			}
			if took > limit+500*time.Millisecond {
				t.Errorf("%s on a frozen server returned after %v, context %v", name, took, limit)
			}
		}

		if st := d.ConnStateForTest(); st != zk.StateHasSession {
			t.Fatalf("connection state %v before Close, want it still established", st)
		}
		start := time.Now()
		_ = d.Close()
		took := time.Since(start)
		t.Logf("Close on a frozen server took %v", took.Round(time.Millisecond))
		if took > closeBound {
			t.Errorf("Close on a frozen server took %v, want at most %v", took, closeBound)
		}
		noneLeft(t, before, "Close")
	})

	t.Run("Reconnecting", func(t *testing.T) {
		before := driverGoroutines()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// go-zookeeper drops a connection that has been silent for two thirds
		// of the session timeout, and reconnects.
		d, err := openDriver(ctx, srv.URL()+"?session_timeout=2s")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Resume() }()
		waitUntil(t, 10*time.Second, "the connection dropped and dialled again", func() bool {
			return d.ConnStateForTest() == zk.StateConnected
		})
		start := time.Now()
		_ = d.Close()
		took := time.Since(start)
		t.Logf("Close during a reconnection's handshake with a frozen server took %v", took.Round(time.Millisecond))
		if took > closeBound {
			t.Errorf("Close during a handshake with a frozen server took %v, want at most %v", took, closeBound)
		}
		noneLeft(t, before, "Close")
	})
}
