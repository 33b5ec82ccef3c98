package servertest

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/lock/internal/testserver"
)

// etcdClient connects to the members named by an etcd://host:port[,host:port...] URL.
func etcdClient(t *testing.T, url string) *clientv3.Client {
	t.Helper()
	endpoints := strings.Split(strings.TrimPrefix(url, "etcd://"), ",")
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func etcdGet(t *testing.T, c *clientv3.Client, key string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

func etcdPut(t *testing.T, c *clientv3.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

func TestEtcd(t *testing.T) {
	url := testserver.Etcd(t)
	if again := testserver.Etcd(t); again != url {
		t.Fatalf("second call gave another server: %s then %s", url, again)
	}
	c := etcdClient(t, url)
	etcdPut(t, c, t.Name(), "v")
	if got, ok := etcdGet(t, c, t.Name()); got != "v" {
		t.Fatalf("Get = %q, %v; want v", got, ok)
	}
}

// TestStartEtcd is the smoke test: start, use with the etcd client, stop.
func TestStartEtcd(t *testing.T) {
	begin := time.Now()
	s := testserver.StartEtcd(t)
	t.Logf("etcd answered %v after start", time.Since(begin).Round(time.Millisecond))
	c := etcdClient(t, s.URL())
	etcdPut(t, c, "k", "v")
	if got, ok := etcdGet(t, c, "k"); got != "v" {
		t.Fatalf("Get = %q, %v; want v", got, ok)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "k"); err == nil {
		t.Fatal("Get answered after Stop")
	}
}

func TestEtcdRestart(t *testing.T) {
	s := testserver.StartEtcd(t)
	c := etcdClient(t, s.URL())
	etcdPut(t, c, "k", "v")
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if got, ok := etcdGet(t, c, "k"); got != "v" {
		t.Fatalf("after Restart(true): Get = %q, %v; want v", got, ok)
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if got, ok := etcdGet(t, c, "k"); ok {
		t.Fatalf("after Restart(false): Get = %q; want no key", got)
	}
}

func TestEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member cluster")
	}
	cl := testserver.EtcdCluster(t, 3)
	if len(cl.Members) != 3 {
		t.Fatalf("%d members, want 3", len(cl.Members))
	}
	all := etcdClient(t, cl.URL())
	etcdPut(t, all, "k", "1")
	for i, m := range cl.Members {
		if got, _ := etcdGet(t, etcdClient(t, m.URL()), "k"); got != "1" {
			t.Fatalf("member %d: Get = %q, want 1", i, got)
		}
	}

	// Stop the leader: the two others elect a new one and keep serving.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := all.Status(ctx, cl.Members[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i, m := range cl.Members {
		mst, err := all.Status(ctx, m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if mst.Header.MemberId == st.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member is the leader")
	}
	if err := cl.Members[leader].Stop(); err != nil {
		t.Fatal(err)
	}
	other := cl.Members[(leader+1)%3]
	etcdPut(t, etcdClient(t, other.URL()), "k", "2")

	if err := cl.Members[leader].Restart(true); err != nil {
		t.Fatal(err)
	}
	if got, _ := etcdGet(t, etcdClient(t, cl.Members[leader].URL()), "k"); got != "2" {
		t.Fatalf("restarted member: Get = %q, want 2", got)
	}
	if err := cl.Members[leader].Restart(false); err == nil {
		t.Fatal("Restart(false) of a cluster member succeeded; want an error")
	}
}
