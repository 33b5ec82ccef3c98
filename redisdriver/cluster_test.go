package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
	"github.com/distlock/lock/internal/testserver"
)

// redisCluster is three masters on loopback ports, made into a Redis Cluster by
// redis-cli --cluster create, and an operator's client of each node.
type redisCluster struct {
	url   string // redis+cluster://... naming every node
	nodes []*redis.Client
}

func startCluster(t *testing.T) *redisCluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if v := os.Getenv(testserver.RequireEnv); v == "1" || v == "true" {
			t.Fatal("redis-cli not found in PATH; it comes with the redis-server package")
		}
		t.Skip("redis-cli not found in PATH (it comes with the redis-server package): cannot create a cluster")
	}
	var addrs []string
	c := &redisCluster{}
	for i := 0; i < 3; i++ {
		s := testserver.StartRedis(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr())
		c.nodes = append(c.nodes, adminClient(t, s.URL()))
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		for {
			info, err := n.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("cluster not ok after 30s: %v %s", err, info)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	c.url = "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	return c
}

// sever deletes the keys of every lock d holds, and kills d's connections on
// every node.
func (c *redisCluster) sever(ctx context.Context, d *Driver) error {
	for _, req := range heldBy(d) {
		for _, n := range c.nodes {
			// Only the node serving the key's slot has it; the others answer MOVED.
			if err := dropHold(ctx, n, d, req); err != nil && !strings.HasPrefix(err.Error(), "MOVED") {
				return err
			}
		}
	}
	name := d.cluster.Options().ClientName
	for _, n := range c.nodes {
		if err := killClients(ctx, n, name); err != nil {
			return err
		}
	}
	return nil
}

func TestConformanceOnCluster(t *testing.T) {
	c := startCluster(t)
	conformance.Run(t, conformance.Harness{
		NewDriver:  func(ctx context.Context) (driver.Driver, error) { return openURL(ctx, c.url) },
		Sever:      func(ctx context.Context, d driver.Driver) error { return c.sever(ctx, d.(*Driver)) },
		SeverCause: lock.ErrExpired,
		// Holder processes (killed holders and leaders) open the cluster too.
		URL: c.url,
	})
}

// The suite again with fencing=false: the fencing properties are skipped
// (Capabilities.Fencing is false), every other one holds on a Cluster too.
func TestConformanceOnClusterWithoutFencing(t *testing.T) {
	c := startCluster(t)
	u := c.url + "&fencing=false"
	conformance.Run(t, conformance.Harness{
		NewDriver:  func(ctx context.Context) (driver.Driver, error) { return openURL(ctx, u) },
		Sever:      func(ctx context.Context, d driver.Driver) error { return c.sever(ctx, d.(*Driver)) },
		SeverCause: lock.ErrExpired,
		URL:        u,
	})
}

// Keys whose locks live on different nodes all lock, wait and hand over, and
// the keys of each lock share one slot whatever braces the user key holds.
func TestClusterLocksInEverySlotAndKeepsEachLockInOneSlot(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, d := subscribedLocker(t, ctx, c.url)
	b, _ := subscribedLocker(t, ctx, c.url)

	nodesUsed := map[string]int{}
	keys := append([]string{}, oddKeys...)
	for i := 0; i < 30; i++ {
		keys = append(keys, fmt.Sprintf("job:%d", i))
	}
	admin := clusterAdmin(t, c)
	for _, key := range keys {
		k := d.keys(key)
		var slots []int64
		for _, name := range scriptKeys(k) {
			slot, err := c.nodes[0].ClusterKeySlot(ctx, name).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, slot)
		}
		for _, s := range slots[1:] {
			if s != slots[0] {
				t.Errorf("key %q: the lock's keys are in slots %v, want one slot", key, slots)
			}
		}
		node, err := d.cluster.MasterForKey(ctx, k.Lock)
		if err != nil {
			t.Fatal(err)
		}
		nodesUsed[node.Options().Addr]++

		// Take it, make the other client wait, hand it over.
		l, err := a.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", key, err)
		}
		got := make(chan *lock.Lock, 1)
		go func() {
			l2, err := b.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
			}
			got <- l2
		}()
		waitQueueLen(t, ctx, admin, k.Queue, 1)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l2 := <-got:
			if l2 == nil {
				t.FailNow()
			}
			if l2.Token() <= l.Token() {
				t.Errorf("key %q: token %d after %d", key, l2.Token(), l.Token())
			}
			_ = l2.Release(ctx)
		case <-time.After(time.Second):
			t.Fatalf("key %q: the waiter was not handed the lock within a second", key)
		}
	}
	t.Logf("locks per node: %v", nodesUsed)
	if len(nodesUsed) != 3 {
		t.Errorf("the keys' locks landed on %d nodes, want all 3", len(nodesUsed))
	}
}

// clusterAdmin is an operator's cluster client, for commands that must reach
// the node serving a key.
func clusterAdmin(t *testing.T, c *redisCluster) *redis.ClusterClient {
	t.Helper()
	o, err := redis.ParseClusterURL(strings.Replace(c.url, "redis+cluster", "redis", 1))
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// A batch of locks spread over every node refreshes in one script call per
// slot (Slot is the server's CLUSTER KEYSLOT), and each lock gets its own
// answer.
func TestClusterRefreshBatchGroupsLocksBySlot(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reqs := holdMany(t, ctx, d, 200, 30*time.Second)
	for _, r := range reqs[:20] {
		name := d.keys(r.Key).Lock
		slot, err := c.nodes[0].ClusterKeySlot(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisproto.Slot(name); int64(got) != slot {
			t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT %d", name, got, slot)
		}
	}
	admin := clusterAdmin(t, c)
	taken := d.keys(reqs[7].Key).Lock
	if err := admin.Set(ctx, taken, "someone else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for i, err := range d.RefreshBatch(ctx, reqs) {
		switch {
		case i == 7 && !errors.Is(err, driver.ErrTakenOver):
			t.Errorf("the lock taken over: %v, want ErrTakenOver", err)
		case i != 7 && err != nil:
			t.Errorf("lock %d: %v", i, err)
		}
	}
	for _, r := range reqs {
		_ = d.Release(ctx, r)
	}
}
