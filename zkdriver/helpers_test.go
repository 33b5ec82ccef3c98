package zkdriver_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/zkdriver"
)

// reaperOptions makes a private ZooKeeper delete empty container nodes every
// 100 ms instead of every minute. The interval is a Java system property that
// zoo.cfg cannot set (unknown zoo.cfg keys become "zookeeper."-prefixed
// properties), so it goes through JAVA_TOOL_OPTIONS, which the server's JVM
// reads at start.
func fastReaper(t *testing.T) {
	t.Setenv("JAVA_TOOL_OPTIONS", "-Dznode.container.checkIntervalMs=100")
}

// openDriver opens a zkdriver.Driver for rawURL the way lock.Open would.
func openDriver(ctx context.Context, rawURL string) (*zkdriver.Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	cfg := driver.Config{URL: u}
	if q := u.Query(); q.Has("prefix") {
		cfg.Prefix = q.Get("prefix")
		q.Del("prefix")
		u.RawQuery = q.Encode()
	}
	open, ok := driver.Lookup(zkdriver.Scheme)
	if !ok {
		return nil, fmt.Errorf("scheme %q not registered", zkdriver.Scheme)
	}
	d, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return d.(*zkdriver.Driver), nil
}

// mustOpen opens a Driver and a Locker over it, closed when t ends.
func mustOpen(t testing.TB, rawURL string, opts ...lock.Option) (*lock.Locker, *zkdriver.Driver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := openDriver(ctx, rawURL)
	if err != nil {
		t.Fatalf("open %s: %v", rawURL, err)
	}
	lk := lock.New(d, opts...)
	t.Cleanup(func() { _ = lk.Close() })
	return lk, d
}

// zkConn is a plain go-zookeeper client for inspecting and disturbing what the
// driver does, closed when t ends.
func zkConn(t testing.TB, rawURL string) *zk.Conn {
	t.Helper()
	servers := strings.Split(strings.TrimPrefix(strings.SplitN(rawURL, "?", 2)[0], "zk://"), ",")
	conn, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		for range events {
		}
	})
	timeout := time.After(20 * time.Second)
	for conn.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-timeout:
			t.Fatalf("no ZooKeeper session with %s after 20s", rawURL)
		}
	}
	return conn
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// expireSession ends the session (id, passwd) from a second connection, the
// standard trick (Curator's old KillSession): a client that presents a live
// session's id and password takes the session over, and closing it makes the
// server expire it and delete its ephemeral nodes, while the first client's
// process lives on and must find out by itself.
func expireSession(addr string, id int64, passwd []byte, timeout time.Duration) error {
	if id == 0 {
		return fmt.Errorf("no session to expire")
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(timeout/time.Millisecond))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	if err := writeFrame(c, req); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 || binary.BigEndian.Uint64(resp[8:16]) == 0 {
		return nil // already expired
	}
	// Request header {xid 1, type closeSession (-11)}.
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xFFFFFFF5))
	if err := writeFrame(c, closeReq); err != nil {
		return err
	}
	if _, err := readFrame(c); err != nil {
		return fmt.Errorf("close response: %w", err)
	}
	return nil
}

func writeFrame(w io.Writer, p []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	p := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, p)
	return p, err
}

// severer returns a conformance Sever hook that expires a driver's session on
// the server at addr.
func severer(addr string) func(context.Context, driver.Driver) error {
	return func(_ context.Context, d driver.Driver) error {
		id, pw, timeout := d.(*zkdriver.Driver).SessionForTest()
		return expireSession(addr, id, pw, timeout)
	}
}

// children lists path's children, or nil if path does not exist.
func children(t testing.TB, conn *zk.Conn, path string) []string {
	t.Helper()
	c, _, err := conn.Children(path)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("Children(%s): %v", path, err)
	}
	return c
}

// waitUntil polls cond every 20 ms until it holds, failing after limit. It is
// for conditions only the server can tell (a node the reaper deletes).
func waitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchedBy reports whether the ZooKeeper server at addr has a watch of
// session on a node under dir, by its wchp command.
func watchedBy(addr, dir string, session int64) bool {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("wchp")); err != nil {
		return false
	}
	out, _ := io.ReadAll(c)
	want := fmt.Sprintf("0x%x", session)
	path := ""
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "\t") {
			path = line
			continue
		}
		if strings.HasPrefix(path, dir) && strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}
