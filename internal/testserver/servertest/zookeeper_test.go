package servertest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/internal/testserver"
)

// zkConnect connects to the servers named by a zk://host:port[,host:port...] URL and
// waits until the session is established.
func zkConnect(t *testing.T, url string) *zk.Conn {
	t.Helper()
	servers := strings.Split(strings.TrimPrefix(url, "zk://"), ",")
	conn, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn
			}
		case <-timeout:
			t.Fatalf("no ZooKeeper session with %s after 20s", url)
		}
	}
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func TestZooKeeper(t *testing.T) {
	url := testserver.ZooKeeper(t)
	if again := testserver.ZooKeeper(t); again != url {
		t.Fatalf("second call gave another server: %s then %s", url, again)
	}
	conn := zkConnect(t, url)
	path := "/" + t.Name()
	if _, err := conn.Create(path, []byte("v"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := conn.Get(path); err != nil || string(got) != "v" {
		t.Fatalf("Get = %q, %v; want v", got, err)
	}
}

// TestStartZooKeeper is the smoke test: start, use with go-zookeeper, stop.
func TestStartZooKeeper(t *testing.T) {
	begin := time.Now()
	s := testserver.StartZooKeeper(t)
	t.Logf("zookeeper answered %v after start", time.Since(begin).Round(time.Millisecond))
	conn := zkConnect(t, s.URL())
	if _, err := conn.Create("/k", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := conn.Get("/k"); err != nil || string(got) != "v" {
		t.Fatalf("Get = %q, %v; want v", got, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.Get("/k"); err == nil {
		t.Fatal("Get answered after Stop")
	}
}

func TestZooKeeperRestart(t *testing.T) {
	s := testserver.StartZooKeeper(t)
	conn := zkConnect(t, s.URL())
	if _, err := conn.Create("/k", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if got, _, err := zkConnect(t, s.URL()).Get("/k"); err != nil || string(got) != "v" {
		t.Fatalf("after Restart(true): Get = %q, %v; want v", got, err)
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := zkConnect(t, s.URL()).Get("/k"); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("after Restart(false): Get err = %v; want zk.ErrNoNode", err)
	}
}

func TestZooKeeperEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server ensemble")
	}
	ens := testserver.ZooKeeperEnsemble(t, 3)
	if len(ens.Members) != 3 {
		t.Fatalf("%d members, want 3", len(ens.Members))
	}
	first := zkConnect(t, ens.Members[0].URL())
	if _, err := first.Create("/k", []byte("1"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	last := zkConnect(t, ens.Members[2].URL())
	if _, err := last.Sync("/k"); err != nil {
		t.Fatal(err)
	}
	if got, _, err := last.Get("/k"); err != nil || string(got) != "1" {
		t.Fatalf("third server: Get = %q, %v; want 1", got, err)
	}

	// With one server killed, the two others still form a quorum.
	if err := ens.Members[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := last.Set("/k", []byte("2"), -1); err != nil {
		t.Fatalf("Set with two of three servers: %v", err)
	}
	if err := ens.Members[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	back := zkConnect(t, ens.Members[0].URL())
	if _, err := back.Sync("/k"); err != nil {
		t.Fatal(err)
	}
	if got, _, err := back.Get("/k"); err != nil || string(got) != "2" {
		t.Fatalf("restarted server: Get = %q, %v; want 2", got, err)
	}
}
