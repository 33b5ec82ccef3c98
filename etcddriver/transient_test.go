package etcddriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// A cluster that lost its quorum answers "no leader" (a waiter's watch) and
// "request timed out" (a write): the driver marks both unavailable, so the
// portable layer retries them, rather than failing the call as if permanent.
func TestQuorumLossIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd cluster")
	}
	cl := testserver.EtcdCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	survivor := "etcd://" + cl.Members[2].Addr()
	// Leases far longer than the test, so that only the server's answers end
	// the calls, not the driver's own keepalive deadline.
	const ttl = time.Minute
	w := newDriver(t, survivor, etcddriver.WithPrefix(testPrefix(t)))
	held := &driver.Request{Key: "k", Owner: "holder", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	if _, err := w.TryAcquire(ctx, held); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := w.Acquire(ctx, &driver.Request{Key: "k", Owner: "waiter", TTL: ttl, Lost: driver.LostFunc(func(error) {})})
		waited <- err
	}()
	queued(t, newClient(t, survivor), w, "k", 2)

	for _, m := range cl.Members[:2] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	tried := make(chan error, 1)
	go func() {
		_, err := w.TryAcquire(ctx, &driver.Request{Key: "other", Owner: "o", TTL: ttl, Lost: driver.LostFunc(func(error) {})})
		tried <- err
	}()
	for _, c := range []struct {
		what string
		ch   <-chan error
	}{{"waiting Acquire", waited}, {"TryAcquire", tried}} {
		select {
		case err := <-c.ch:
			t.Logf("%s after %v: %v", c.what, time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, driver.ErrUnavailable) {
				t.Errorf("%s without quorum = %v, want an error matching ErrUnavailable", c.what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s without quorum did not return within 30s", c.what)
		}
	}
}

// A request in flight when the connection dies (here: the server froze and
// gRPC's keepalive gave the connection up) fails as unavailable.
func TestConnectionLostMidRequestIsUnavailable(t *testing.T) {
	s := testserver.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// gRPC raises keepalive_time to its minimum, 10s.
	d, err := openURL(ctx, s.URL()+testPrefix(t)+"?keepalive_time=1s&keepalive_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const ttl = time.Minute
	if _, err := d.TryAcquire(ctx, &driver.Request{Key: "a", Owner: "o", TTL: ttl, Lost: driver.LostFunc(func(error) {})}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Resume(); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	_, err = d.TryAcquire(ctx, &driver.Request{Key: "b", Owner: "o", TTL: ttl, Lost: driver.LostFunc(func(error) {})})
	t.Logf("TryAcquire after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if ctx.Err() != nil {
		t.Fatal("the request outlived its context instead of failing with the connection")
	}
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("TryAcquire whose connection died = %v, want an error matching ErrUnavailable", err)
	}
}
