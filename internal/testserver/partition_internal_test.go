package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// waitUntil polls cond until it returns nil, failing t with cond's last error
// after within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not an ordering
	}
}

// dropsPeerTrafficBothWays checks, while member 0 of c is partitioned by p, that
// this process cannot reach member 0's peer ports (it is not member 0's user and
// so stands for the other members) and that the partition drops packets in all
// three ways: to member 0, from member 0, and on connections member 0 made.
func dropsPeerTrafficBothWays(t *testing.T, c *Cluster, p *Partition) {
	t.Helper()
	for _, port := range c.peerPorts(0) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// A loopback connect that is let through succeeds at once; a dropped SYN
		// times out.
		conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			conn.Close()
			t.Fatalf("connected to member 0's peer port %s across the partition", addr)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("dial %s across the partition: %v; want a timeout (packets dropped)", addr, err)
		}
	}
	waitUntil(t, 30*time.Second, "packets dropped in every direction", func(context.Context) error {
		to, from, dialed, err := p.Dropped()
		if err != nil {
			return err
		}
		if to == 0 || from == 0 || dialed == 0 {
			return fmt.Errorf("dropped to member 0: %d, from member 0: %d, on its own connections: %d", to, from, dialed)
		}
		return nil
	})
}

func TestPartitionCutsAnEtcdMemberOffFromItsPeersUntilHealed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member cluster")
	}
	c := EtcdCluster(t, 3)
	p := c.Partition(t, 0)
	health := func(i int) func(ctx context.Context) error {
		return func(ctx context.Context) error { return etcdHealth(ctx, "http://"+c.Members[i].Addr()) }
	}
	waitUntil(t, 30*time.Second, "member 0 without a leader", func(ctx context.Context) error {
		if health(0)(ctx) == nil {
			return errors.New("member 0 is healthy across the partition")
		}
		return nil
	})
	for i := 1; i < 3; i++ {
		waitUntil(t, 30*time.Second, fmt.Sprintf("member %d healthy on the majority side", i), health(i))
	}
	dropsPeerTrafficBothWays(t, c, p)

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if exists(p.chain) {
		t.Fatalf("chain %s still there after Heal", p.chain)
	}
	for i := range c.Members {
		waitUntil(t, 30*time.Second, fmt.Sprintf("member %d healthy after healing", i), health(i))
	}
}

func TestPartitionCutsAZooKeeperServerOffFromItsPeersUntilHealed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server ensemble")
	}
	c := ZooKeeperEnsemble(t, 3)
	p := c.Partition(t, 0)
	serving := func(i int) func(ctx context.Context) error {
		return func(ctx context.Context) error { return zkServing(ctx, c.Members[i].Addr()) }
	}
	// A server that cannot reach a quorum stops serving (after syncLimit ticks).
	waitUntil(t, 30*time.Second, "server 0 not serving", func(ctx context.Context) error {
		if serving(0)(ctx) == nil {
			return errors.New("server 0 serves across the partition")
		}
		return nil
	})
	for i := 1; i < 3; i++ {
		waitUntil(t, 30*time.Second, fmt.Sprintf("server %d serving on the majority side", i), serving(i))
	}
	dropsPeerTrafficBothWays(t, c, p)

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	for i := range c.Members {
		waitUntil(t, 60*time.Second, fmt.Sprintf("server %d serving after healing", i), serving(i))
	}
}
