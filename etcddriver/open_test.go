package etcddriver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

const secret = "s3cr3t-PW"

// checkNoSecret fails if s shows the password.
func checkNoSecret(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, secret) {
		t.Errorf("%s shows the password: %s", what, s)
	}
}

// Errors about URLs name the problem and never the password.
func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		url  string
		want error
	}{
		{"etcd://root:" + secret + "@127.0.0.1:2379/x?bogus=1", lock.ErrInvalidURL},
		{"etcd://root:" + secret + "@127.0.0.1:abc/x", lock.ErrInvalidURL},    // bad port
		{"etcd://root:" + secret + "@h1,,h2/x", lock.ErrInvalidURL},           // empty host
		{"etcd://root:" + secret + "@h/x?cacert=/ca.pem", lock.ErrInvalidURL}, // TLS parameter without TLS
		{"etcds://root:" + secret + "@h/x?cacert=/nonexistent/ca.pem", lock.ErrInvalidURL},
		{"etcd://root:" + secret + "@h/x%zz", lock.ErrInvalidURL}, // bad escape
	} {
		_, err := lock.Open(ctx, c.url)
		if !errors.Is(err, c.want) {
			t.Errorf("Open(%s) = %v, want %v", strings.ReplaceAll(c.url, secret, "xxxxx"), err, c.want)
			continue
		}
		checkNoSecret(t, "Open's error", err.Error())
	}
}

// With authentication on, a wrong password fails without being shown, the right
// one works, and a user whose role only covers the lock prefix can lock there.
func TestAuthenticationWorksAndNeverShowsThePassword(t *testing.T) {
	s := testserver.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := newClient(t, s.URL())
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "root-"+secret); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "locker", "/app/", clientv3.GetPrefixRangeEnd("/app/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "locker", secret); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "locker", "locker"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	host := strings.TrimPrefix(s.URL(), "etcd://")

	_, err := lock.Open(ctx, "etcd://locker:wrong-"+secret+"@"+host+"/app")
	if err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	checkNoSecret(t, "Open's error", err.Error())
	t.Log(err)

	lk, err := lock.Open(ctx, "etcd://locker:"+secret+"@"+host+"/app?ttl=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	checkNoSecret(t, "Locker.String", lk.String())
	a, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("Acquire as a user limited to the prefix: %v", err)
	}
	// Another client of the same user is excluded, and woken by the release.
	lk2, err := lock.Open(ctx, "etcd://locker:"+secret+"@"+host+"/app")
	if err != nil {
		t.Fatal(err)
	}
	defer lk2.Close()
	if _, err := lk2.TryAcquire(ctx, "k", lock.WithTTL(2*time.Second)); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire = %v, want ErrLocked", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := lk2.Acquire(ctx, "k", lock.WithTTL(2*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// Outside its prefix the user is refused at Open, with etcd's error.
	other, err := lock.Open(ctx, "etcd://locker:"+secret+"@"+host+"/elsewhere?ttl=2s")
	if err == nil {
		other.Close()
		t.Fatal("Open outside the user's prefix succeeded")
	}
	if !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("Open outside the user's prefix = %v, want a permission error", err)
	}
	checkNoSecret(t, "Open's error", err.Error())
	t.Log(err)
}

// lock.Open of an etcd URL gives a working Locker named without secrets.
func TestOpenedURLGivesAWorkingLocker(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := lock.Open(ctx, url+"/distlock-open?ttl=3s&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if got := lk.Capabilities(); !got.Fencing || !got.Expiring || !got.Notify || got.MinTTL < time.Second {
		t.Errorf("Capabilities = %+v", got)
	}
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An unreachable etcd fails Open within dial_timeout.
func TestUnreachableEtcdFailsOpenWithinDialTimeout(t *testing.T) {
	start := time.Now()
	_, err := lock.Open(context.Background(), "etcd://127.0.0.1:1/x?dial_timeout=500ms")
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Open took %v with dial_timeout=500ms", took)
	}
	t.Log(err)
}
