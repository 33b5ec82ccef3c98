package etcddriver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/lock"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// authEtcd starts an etcd with authentication on, a user "locker" (password
// secret) who may read and write under /app/, and a user "reader" (password
// secret) who may only read there. It returns the server's host:port.
func authEtcd(t *testing.T) (host string) {
	t.Helper()
	const rootPW = "root-" + secret
	s := testserver.StartEtcdWithAuth(t, rootPW)
	host = strings.TrimPrefix(s.URL(), "etcd://")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: testserver.EtcdRootUser, Password: rootPW})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, u := range []struct {
		name string
		perm clientv3.PermissionType
	}{{"locker", clientv3.PermissionType(clientv3.PermReadWrite)}, {"reader", clientv3.PermissionType(clientv3.PermRead)}} {
		for _, step := range []func() error{
			func() error { _, err := root.RoleAdd(ctx, u.name); return err },
			func() error {
				_, err := root.RoleGrantPermission(ctx, u.name, "/app/", clientv3.GetPrefixRangeEnd("/app/"), u.perm)
				return err
			},
			func() error { _, err := root.UserAdd(ctx, u.name, secret); return err },
			func() error { _, err := root.UserGrantRole(ctx, u.name, u.name); return err },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return host
}

// Against an etcd with authentication on, Open fails at once, with a clear
// error that never shows the password and is not taken for a passing outage,
// when the URL has no credentials, a wrong password, or a user who may not read
// and write under the prefix; with a user who may, Open works and locks.
func TestOpenVerifiesAccessWithAClearRedactedError(t *testing.T) {
	host := authEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name, url string
		want      []string // in the message
	}{
		{"NoCredentials", "etcd://" + host + "/app", []string{"authentication", "user:password@"}},
		{"WrongPassword", "etcd://locker:wrong-" + secret + "@" + host + "/app", []string{"authentication", `"locker"`}},
		{"UnknownUser", "etcd://nobody:" + secret + "@" + host + "/app", []string{"authentication", `"nobody"`}},
		{"OutsideTheUsersPrefix", "etcd://locker:" + secret + "@" + host + "/elsewhere", []string{"permission denied", `"locker"`, `"/elsewhere"`}},
		{"ReadOnlyUser", "etcd://reader:" + secret + "@" + host + "/app", []string{"permission denied", `"reader"`, `"/app"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lk, err := lock.Open(ctx, c.url)
			if err == nil {
				lk.Close()
				t.Fatal("Open succeeded")
			}
			t.Log(err)
			checkNoSecret(t, "Open's error", err.Error())
			if errors.Is(err, lock.ErrUnavailable) {
				t.Errorf("Open's error is marked transient: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open's error does not say %s: %v", w, err)
				}
			}
		})
	}

	lk, err := lock.Open(ctx, "etcd://locker:"+secret+"@"+host+"/app?ttl=2s")
	if err != nil {
		t.Fatalf("Open as a user who may lock under the prefix: %v", err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// New, given a client without credentials for an etcd with authentication on,
// fails as Open does instead of at the first acquire.
func TestNewVerifiesAccess(t *testing.T) {
	host := authEtcd(t)
	c := newClient(t, "etcd://"+host)
	d, err := etcddriver.New(c, etcddriver.WithPrefix("/app"), etcddriver.WithMinTTL(2*time.Second))
	if err == nil {
		d.Close()
		t.Fatal("New with a client that has no credentials succeeded")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "authentication") {
		t.Errorf("New's error does not say authentication: %v", err)
	}
}
