package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartZooKeeper starts a private standalone ZooKeeper server for t and stops it when
// t ends. args are extra zoo.cfg lines, such as "tickTime=200"; they override the
// defaults (tickTime=500, minSessionTimeout=1000, maxSessionTimeout=60000).
func StartZooKeeper(t testing.TB, args ...string) *Server {
	t.Helper()
	return startPrivate(t, zookeeperBackend, args)
}

// ZooKeeperEnsemble starts a ZooKeeper ensemble of n servers on loopback ports for
// t, returning once every server is a leader or follower, and stops it when t ends.
func ZooKeeperEnsemble(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, zookeeperBackend, func() (*Cluster, error) { return startZooKeeperEnsemble(n, nil) })
}

// zkJar is ZooKeeper's server jar as Debian and Ubuntu install it; its manifest names
// the jars it needs. zkLogJars add a log4j binding so that the server log says
// something (without them SLF4J logs nothing).
var (
	zkJar     = "/usr/share/java/zookeeper.jar"
	zkLogJars = []string{"/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"}
	zkConfDir = "/etc/zookeeper/conf" // log4j.properties
)

func startZooKeeper(args []string) (*Server, error) {
	c, err := startZooKeeperEnsemble(1, args)
	if err != nil {
		return nil, err
	}
	return c.Members[0], nil
}

func startZooKeeperEnsemble(n int, args []string) (*Cluster, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, &notInstalledError{"java (for ZooKeeper) not found in PATH"}
	}
	if _, err := os.Stat(zkJar); err != nil {
		return nil, &notInstalledError{"ZooKeeper's " + zkJar + " not found"}
	}
	classpath := []string{zkConfDir, zkJar}
	for _, jar := range zkLogJars {
		if _, err := os.Stat(jar); err == nil {
			classpath = append(classpath, jar)
		}
	}
	return retryCluster(n, "zk", func(c *Cluster, i int) (*Server, error) {
		return newZooKeeperMember(java, strings.Join(classpath, ":"), c, i, args)
	})
}

// newZooKeeperMember makes server i of c (not started). Each server has a client
// port, and in an ensemble a quorum and an election port.
func newZooKeeperMember(java, classpath string, c *Cluster, i int, args []string) (*Server, error) {
	n := len(c.Members)
	if c.ports == nil {
		ports, err := freePorts(3 * n)
		if err != nil {
			return nil, err
		}
		c.ports = ports
	}
	dir, err := makeDir("zk")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ports[i]))
	cfg := []string{
		"tickTime=500",
		"minSessionTimeout=1000",
		"maxSessionTimeout=60000",
		"dataDir=" + data,
		"clientPort=" + strconv.Itoa(c.ports[i]),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr,stat,wchp", // wchp: tests wait for a watch to be set
	}
	if n > 1 {
		cfg = append(cfg, "initLimit=20", "syncLimit=10")
		for j := range n {
			cfg = append(cfg, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", j+1, c.ports[n+j], c.ports[2*n+j]))
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	cfg = append(cfg, args...)
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	// As root each server of an ensemble runs under its own user (see Partition).
	cred := memberCredential(n, i)
	if err := chownTree(dir, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{
		name:       "zookeeper",
		url:        "zk://" + addr,
		addr:       addr,
		dir:        dir,
		log:        filepath.Join(dir, "server.log"),
		stopSignal: syscall.SIGTERM,
	}
	s.command = func() *exec.Cmd {
		cmd := exec.Command(java, "-Xmx256m",
			"-Dzookeeper.log.dir="+dir, "-Dzookeeper.root.logger=INFO,CONSOLE",
			"-cp", classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	s.probe = func(ctx context.Context) error { return zkServing(ctx, addr) }
	s.wipe = func() error { return os.RemoveAll(filepath.Join(data, "version-2")) } // keeps myid
	return s, nil
}

var zkMode = regexp.MustCompile(`(?m)^Mode: (standalone|leader|follower)$`)

// zkServing sends the srvr four-letter word and checks that the server serves
// requests. (ruok answers imok before a server has loaded its data or joined a
// quorum, so it is not enough.)
func zkServing(ctx context.Context, addr string) error {
	out, err := zkFourLetter(ctx, addr, "srvr")
	if err != nil {
		return err
	}
	if !zkMode.MatchString(out) {
		return fmt.Errorf("srvr answered %q", strings.TrimSpace(out))
	}
	return nil
}

// zkFourLetter sends a four-letter word and returns the whole answer.
func zkFourLetter(ctx context.Context, addr, word string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	_ = conn.SetDeadline(deadline)
	if _, err := io.WriteString(conn, word); err != nil {
		return "", err
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return "", fmt.Errorf("%s: %w", word, err)
	}
	return string(out), nil
}
