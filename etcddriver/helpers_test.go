package etcddriver_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// endpoints returns the host:port list of an etcd://... URL.
func endpoints(rawURL string) []string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	return strings.Split(u.Host, ",")
}

// newClient connects a plain etcd client, closed when t ends.
func newClient(t testing.TB, rawURL string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints(rawURL), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newDriver opens a driver with its own client, as a separate process would have,
// closed when t ends.
func newDriver(t testing.TB, rawURL string, opts ...etcddriver.Option) *etcddriver.Driver {
	t.Helper()
	d, err := etcddriver.New(newClient(t, rawURL), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// newLocker opens a Locker over a new driver, closed when t ends.
func newLocker(t testing.TB, rawURL string, opts ...lock.Option) (*lock.Locker, *etcddriver.Driver) {
	t.Helper()
	d := newDriver(t, rawURL, etcddriver.WithPrefix(testPrefix(t)))
	lk := lock.New(d, opts...)
	t.Cleanup(func() { lk.Close() })
	return lk, d
}

// testPrefix gives every test its own namespace on a shared server.
func testPrefix(t testing.TB) string { return "/distlock-test/" + t.Name() }

// sever revokes every lease of d from another client, as an operator's
// `etcdctl lease revoke` would.
func sever(ctx context.Context, c *clientv3.Client, d driver.Driver) error {
	for _, id := range d.(*etcddriver.Driver).Leases() {
		if _, err := c.Revoke(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

func waitClosed(t testing.TB, ch <-chan struct{}, bound time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(bound):
		t.Fatalf("%s: not within %v", what, bound)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// testserverEtcd is the shared etcd server for tests that need no control over it.
func testserverEtcd(t testing.TB) string { return testserver.Etcd(t) }
