package etcddriver_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// openURL opens a driver from an etcd URL as lock.Open would, without the
// portable layer's own deadline.
func openURL(ctx context.Context, rawURL string) (driver.Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	open, _ := driver.Lookup(etcddriver.Scheme)
	return open(ctx, driver.Config{URL: u})
}

// closeBound is how long Close may take against a server that answers nothing:
// "about a second" (it revokes leases for at most closeRevokeTimeout), with room
// for a loaded machine.
const closeBound = 1500 * time.Millisecond

// Close returns within about a second when the server is frozen (SIGSTOP), with
// locks held and an Acquire waiting, whether the driver opened its client or was
// given one.
func TestCloseOnAFrozenServerReturnsWithinASecond(t *testing.T) {
	s := testserver.StartEtcd(t)
	for _, owned := range []bool{true, false} {
		name := "OpenedFromURL"
		if !owned {
			name = "GivenAClient"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var d driver.Driver
			if owned {
				var err error
				if d, err = openURL(ctx, s.URL()+testPrefix(t)); err != nil {
					t.Fatal(err)
				}
			} else {
				d = newDriver(t, s.URL(), etcddriver.WithPrefix(testPrefix(t)))
			}
			defer d.Close()
			ttl := 5 * time.Second
			for _, k := range []string{"a", "b"} {
				if _, err := d.TryAcquire(ctx, &driver.Request{Key: k, Owner: "h", TTL: ttl, Lost: driver.LostFunc(func(error) {})}); err != nil {
					t.Fatal(err)
				}
			}
			// A second lease (another TTL) and a waiter queued behind our own lock.
			if _, err := d.TryAcquire(ctx, &driver.Request{Key: "c", Owner: "h", TTL: 2 * ttl, Lost: driver.LostFunc(func(error) {})}); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() {
				_, err := d.(driver.Acquirer).Acquire(ctx, &driver.Request{Key: "a", Owner: "w", TTL: ttl, Lost: driver.LostFunc(func(error) {})})
				waited <- err
			}()
			queued(t, newClient(t, s.URL()), d.(*etcddriver.Driver), "a", 2)

			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Resume(); err != nil {
					t.Error(err)
				}
			}()
			start := time.Now()
			err := d.Close()
			took := time.Since(start)
			t.Logf("Close on a frozen server took %v (err %v)", took.Round(time.Millisecond), err)
			if took > closeBound {
				t.Errorf("Close took %v on a frozen server, want at most %v", took.Round(time.Millisecond), closeBound)
			}
			select {
			case err := <-waited:
				if !errors.Is(err, driver.ErrClosed) {
					t.Errorf("waiting Acquire ended by Close = %v, want ErrClosed", err)
				}
			case <-time.After(time.Second):
				t.Error("a waiting Acquire did not end within a second of Close")
			}
		})
	}
}

// Open honours its context in every step against a frozen server: connecting,
// authenticating and checking access end when the context does, with the
// context's error, even when dial_timeout is longer.
func TestOpenOnAFrozenServerEndsWithItsContext(t *testing.T) {
	const pw = "root-" + secret
	for _, tc := range []struct {
		name  string
		start func(t testing.TB) *testserver.Server
		user  string
	}{
		{"NoAuthentication", func(t testing.TB) *testserver.Server { return testserver.StartEtcd(t) }, ""},
		{"WithCredentials", func(t testing.TB) *testserver.Server { return testserver.StartEtcdWithAuth(t, pw) }, testserver.EtcdRootUser + ":" + pw + "@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			raw := "etcd://" + tc.user + strings.TrimPrefix(s.URL(), "etcd://") + testPrefix(t) + "?dial_timeout=10s"
			// The server answers before the freeze: Open would work.
			d, err := openURL(context.Background(), raw)
			if err != nil {
				t.Fatal(err)
			}
			d.Close()
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Resume(); err != nil {
					t.Error(err)
				}
			}()
			const bound = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			start := time.Now()
			d, err = openURL(ctx, raw)
			took := time.Since(start)
			t.Logf("Open with a %v context against a frozen server: %v after %v", bound, err, took.Round(time.Millisecond))
			if err == nil {
				d.Close()
				t.Fatal("Open against a frozen server succeeded")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Open = %v, want the context's error", err)
			}
			checkNoSecret(t, "Open's error", err.Error())
			if took > bound+time.Second {
				t.Errorf("Open took %v with a %v context", took.Round(time.Millisecond), bound)
			}
		})
	}
}

// Every call of a driver ends with its context against a frozen server.
func TestCallsOnAFrozenServerEndWithTheirContext(t *testing.T) {
	s := testserver.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := newDriver(t, s.URL(), etcddriver.WithPrefix(testPrefix(t)))
	ttl := 10 * time.Second
	held := &driver.Request{Key: "held", Owner: "h", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, held); err != nil {
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
	const bound = 300 * time.Millisecond
	for _, c := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error {
			_, err := d.TryAcquire(ctx, &driver.Request{Key: "k1", Owner: "o", TTL: ttl, Lost: driver.LostFunc(func(error) {})})
			return err
		}},
		{"AcquireOnANewLease", func(ctx context.Context) error {
			_, err := d.Acquire(ctx, &driver.Request{Key: "k2", Owner: "o", TTL: 2 * ttl, Lost: driver.LostFunc(func(error) {})})
			return err
		}},
		{"Refresh", func(ctx context.Context) error { return d.Refresh(ctx, held) }},
		{"RefreshBatch", func(ctx context.Context) error { return d.RefreshBatch(ctx, []*driver.Request{held})[0] }},
		{"Release", func(ctx context.Context) error { return d.Release(ctx, held) }},
	} {
		cctx, ccancel := context.WithTimeout(ctx, bound)
		start := time.Now()
		err := c.call(cctx)
		took := time.Since(start)
		ccancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a frozen server = %v, want the context's error", c.name, err)
		}
		if errors.Is(err, driver.ErrUnavailable) {
			t.Errorf("%s: the caller's own deadline is marked unavailable: %v", c.name, err)
		}
		if took > bound+time.Second {
			t.Errorf("%s took %v with a %v context", c.name, took.Round(time.Millisecond), bound)
		}
	}
}
