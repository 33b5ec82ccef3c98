package zkdriver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// While the server is down, each driver call makes its one attempt and
// reports the failure as driver.ErrUnavailable, soon (go-zookeeper fails the
// requests it holds each time it has tried every server, about every second),
// instead of retrying until its context ends: the portable layer owns the
// retries. Through the portable layer an Acquire therefore outlives a restart
// shorter than its context.
func TestServerOutageIsReportedUnavailableAndOutlived(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A session timeout beyond the outage: the sessions survive it.
	url := srv.URL() + "?session_timeout=30s"
	d, err := openDriver(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	lk, _ := mustOpen(t, url)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context, *driver.Request) error{
		"TryAcquire": func(ctx context.Context, r *driver.Request) error { _, err := d.TryAcquire(ctx, r); return err },
		"Acquire":    func(ctx context.Context, r *driver.Request) error { _, err := d.Acquire(ctx, r); return err },
	} {
		req := &driver.Request{Key: "outage-" + name, Owner: name, TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
		const limit = 10 * time.Second
		callCtx, cancel := context.WithTimeout(ctx, limit)
		start := time.Now()
		err := call(callCtx, req)
		took := time.Since(start)
		cancel()
		t.Logf("%s with the server down: %v after %v", name, err, took.Round(time.Millisecond))
		if !errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("%s with the server down = %v, want an error matching driver.ErrUnavailable", name, err)
		}
		if took > limit/2 {
			t.Errorf("%s with the server down returned after %v: it retried instead of reporting", name, took)
		}
		_ = d.Release(ctx, req) // nothing was queued; the request is forgotten
	}

	// The Acquire starts while the server is down and must outlive the
	// outage, however long the server takes to come back (a JVM's start on a
	// saturated machine takes tens of seconds): its context ends a fixed time
	// after the server is ready again, not a fixed time after the test began.
	// That time is the session timeout (the longest the client may need to
	// settle its session, resumed or expired and replaced) with as much again
	// for load.
	const afterReady = 2 * 30 * time.Second
	acqCtx, acqCancel := context.WithCancel(context.Background())
	defer acqCancel()
	type result struct {
		l   *lock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := lk.Acquire(acqCtx, "outage")
		got <- result{l, err}
	}()
	down := time.Now()
	if err := srv.Restart(true); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	t.Logf("the server was ready again %v after the Acquire began", ready.Sub(down).Round(time.Millisecond))
	deadline := time.AfterFunc(afterReady, acqCancel)
	defer deadline.Stop()
	r := <-got
	if r.err != nil {
		t.Fatalf("Acquire across the restart, %v after the server was ready: %v", time.Since(ready).Round(time.Millisecond), r.err)
	}
	t.Logf("Acquire across the restart granted %v after the server was ready", time.Since(ready).Round(time.Millisecond))
	relCtx, relCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer relCancel()
	if err := r.l.Release(relCtx); err != nil {
		t.Fatal(err)
	}
}

// A refusal by the server (here a key node whose ACL shuts this client out)
// is permanent: Acquire fails at once with an error matching ErrBackend and the
// server's zk.ErrNoAuth, not ErrUnavailable, and is not retried until its
// context ends.
func TestRefusalByTheServerFailsAcquireAtOnce(t *testing.T) {
	base := testserver.ZooKeeper(t)
	lk, d := mustOpen(t, base+"?prefix="+zkdriver.EscapeName(t.Name()))
	operator := zkConn(t, base)
	if err := operator.AddAuth("digest", []byte("owner:secret")); err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Create(d.LockPath("guarded"), nil, 0, zk.DigestACL(zk.PermAll, "owner", "secret")); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = operator.Delete(d.LockPath("guarded"), -1) }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := lk.Acquire(ctx, "guarded")
	took := time.Since(start)
	if !errors.Is(err, zk.ErrNoAuth) || !errors.Is(err, lock.ErrBackend) || errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Acquire on a key node this client may not use = %v, want a permanent error matching zk.ErrNoAuth", err)
	}
	if took > 5*time.Second {
		t.Errorf("Acquire took %v to report a permanent refusal", took)
	}
}

// The classification itself, for errors no test server produces on demand
// (ZooKeeper's connection-loss and operation-timeout codes, which go-zookeeper
// reports as "unknown error: <code>").
func TestTransientErrorsAreMarkedUnavailableAndOthersNot(t *testing.T) {
	code := func(c int) error { return fmt.Errorf("unknown error: %d", c) }
	cases := []struct {
		err       error
		transient bool
	}{
		{zk.ErrConnectionClosed, true},
		{fmt.Errorf("zkdriver: create key node: %w", zk.ErrNoServer), true},
		{zk.ErrSessionMoved, true},
		{zk.ErrSessionExpired, true},
		{fmt.Errorf("zkdriver: %w", code(-4)), true}, // connection loss
		{code(-7), true},                             // operation timeout
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{code(-2), false}, // runtime inconsistency
		{zk.ErrNoAuth, false},
		{zk.ErrAuthFailed, false},
		{zk.ErrBadArguments, false},
		{zk.ErrInvalidACL, false},
		{zk.ErrNoNode, false},
		{driver.ErrNotHeld, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
	}
	for _, c := range cases {
		got := zkdriver.Unavailable(c.err)
		if marked := errors.Is(got, driver.ErrUnavailable); marked != c.transient {
			t.Errorf("%v: marked unavailable %v, want %v", c.err, marked, c.transient)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%v: the marked error %v does not match it any more", c.err, got)
		}
	}
	if zkdriver.Unavailable(nil) != nil {
		t.Error("nil marked as an error")
	}
}
