package testserver

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Cluster is a group of servers that form one service: EtcdCluster and
// ZooKeeperEnsemble make them. Fault-injection tests act on single members.
type Cluster struct {
	// Members are the cluster's servers, in a fixed order.
	Members []*Server

	scheme string
	ports  []int  // all ports the members use, picked before they start
	token  string // etcd's initial-cluster-token
}

// URL returns a URL naming every member: etcd://127.0.0.1:P1,127.0.0.1:P2,... or
// zk://127.0.0.1:P1,...
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Members))
	for i, m := range c.Members {
		addrs[i] = m.Addr()
	}
	return c.scheme + "://" + strings.Join(addrs, ",")
}

// Endpoints returns the members' client addresses, host:port.
func (c *Cluster) Endpoints() []string {
	addrs := make([]string, len(c.Members))
	for i, m := range c.Members {
		addrs[i] = m.Addr()
	}
	return addrs
}

func (c *Cluster) close() {
	for _, m := range c.Members {
		if m != nil {
			m.close()
		}
	}
}

// startCluster starts a cluster for t and closes it when t ends.
func startCluster(t testing.TB, b *backend, start func() (*Cluster, error)) *Cluster {
	t.Helper()
	begin := time.Now()
	c, err := start()
	var missing *notInstalledError
	switch {
	case errors.As(err, &missing):
		skipOrFail(t, fmt.Sprintf("cannot start a %s cluster: %v; run %q", b.name, missing, installHint))
	case err != nil:
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(c.close)
	t.Logf("testserver: %d-member %s cluster %s ready in %v", len(c.Members), b.name, c.URL(), time.Since(begin).Round(time.Millisecond))
	return c
}

// retryCluster makes n members with newMember, starts them all, and waits until each
// answers. It starts over on fresh ports when a port was taken meanwhile.
func retryCluster(n int, scheme string, newMember func(c *Cluster, i int) (*Server, error)) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: a cluster needs at least one member, not %d", n)
	}
	for attempt := 1; ; attempt++ {
		c, err := tryCluster(n, scheme, newMember)
		if err == nil {
			return c, nil
		}
		if !addrInUse(err) || attempt == portAttempts {
			return nil, err
		}
	}
}

func tryCluster(n int, scheme string, newMember func(c *Cluster, i int) (*Server, error)) (*Cluster, error) {
	c := &Cluster{Members: make([]*Server, n), scheme: scheme}
	for i := range n {
		m, err := newMember(c, i)
		if err != nil {
			c.close()
			return nil, err
		}
		c.Members[i] = m
	}
	// Members wait for each other, so all must run before any can answer.
	for _, m := range c.Members {
		if err := m.launch(); err != nil {
			c.close()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := m.waitReady(); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}
