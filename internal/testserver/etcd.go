package testserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// StartEtcd starts a private single-member etcd server for t and stops it when t
// ends. args are extra etcd flags, such as "--auto-compaction-retention=1".
func StartEtcd(t testing.TB, args ...string) *Server {
	t.Helper()
	return startPrivate(t, etcdBackend, args)
}

// EtcdCluster starts an etcd cluster of n members on loopback ports for t, returning
// once it has a leader, and stops it when t ends. args are extra flags for every
// member, such as "--pre-vote".
func EtcdCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	return startCluster(t, etcdBackend, func() (*Cluster, error) { return startEtcdCluster(n, args) })
}

func startEtcd(args []string) (*Server, error) {
	c, err := startEtcdCluster(1, args)
	if err != nil {
		return nil, err
	}
	s := c.Members[0]
	data := filepath.Join(s.dir, "data")
	s.wipe = func() error { return os.RemoveAll(data) }
	return s, nil
}

func startEtcdCluster(n int, args []string) (*Cluster, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, &notInstalledError{"etcd not found in PATH"}
	}
	return retryCluster(n, "etcd", func(c *Cluster, i int) (*Server, error) {
		return newEtcdMember(bin, c, i, args)
	})
}

// newEtcdMember makes member i of c (not started). Each member has a client and a
// peer port; initial-cluster lists the peer ports of all members.
func newEtcdMember(bin string, c *Cluster, i int, args []string) (*Server, error) {
	n := len(c.Members)
	if c.ports == nil {
		ports, err := freePorts(2 * n)
		if err != nil {
			return nil, err
		}
		c.ports = ports
		c.token = "distlock-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(ports[0])
	}
	var initial []string
	for j := range n {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", j, c.ports[n+j]))
	}
	dir, err := makeDir("etcd")
	if err != nil {
		return nil, err
	}
	// As root each member of a cluster runs under its own user (see Partition).
	cred := memberCredential(n, i)
	if err := chownTree(dir, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(c.ports[i])
	peer := "http://127.0.0.1:" + strconv.Itoa(c.ports[n+i])
	addr := strings.TrimPrefix(client, "http://")
	s := &Server{
		name:       "etcd",
		url:        "etcd://" + addr,
		addr:       addr,
		dir:        dir,
		log:        filepath.Join(dir, "server.log"),
		stopSignal: syscall.SIGTERM,
	}
	s.command = func() *exec.Cmd {
		argv := append([]string{
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", c.token, "--initial-cluster-state", "new",
			"--logger", "zap", "--log-outputs", "stderr",
		}, args...)
		cmd := exec.Command(bin, argv...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	s.probe = func(ctx context.Context) error { return etcdHealth(ctx, client) }
	return s, nil
}

// etcdClient checks health without keeping connections (or goroutines) alive.
var etcdClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// etcdHealth asks a member's /health endpoint, which answers true once the member
// has a leader and can serve a quorum read.
func etcdHealth(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := etcdClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return fmt.Errorf("/health: %s: %w", resp.Status, err)
	}
	if h.Health != "true" {
		return fmt.Errorf("/health: %s %q", h.Health, h.Reason)
	}
	return nil
}
