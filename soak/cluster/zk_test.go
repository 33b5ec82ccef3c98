package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/internal/testserver"
	_ "github.com/distlock/lock/zkdriver"
)

// zkSessionTimeout is the session timeout the clients ask for (the ensemble's
// tickTime is 500 ms, so the server grants it as asked), and zkTTL the lock TTL.
const (
	zkSessionTimeout = 4 * time.Second
	zkTTL            = 4 * time.Second
)

// A holder whose client talks only to one ZooKeeper server, cut off from the two
// others for longer than the session timeout: the majority expires its session
// and deletes its node, and another client gets the lock. zkdriver promises that
// Lost closes before the ensemble's leader may expire the session: the driver
// counts the session timeout (less the drift allowance) from the latest moment
// the leader is known to have heard of the session, which a cut-off server's
// answers to reads do not move (it answers them until it notices, syncLimit
// ticks later, 5 s here). With the holder on a follower, the leader hears of
// the session only through the follower's ping answers; with the holder on the
// leader, the two others elect a new leader, which starts every session's
// timeout afresh.
func TestZooKeeperHolderCutOffFromTheMajorityLosesItsLockBeforeAnotherClientGetsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3-server ZooKeeper ensembles and partitions them")
	}
	for _, role := range []string{"leader", "follower"} {
		t.Run("holder-on-"+role, func(t *testing.T) {
			ens := testserver.ZooKeeperEnsemble(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			leader, err := zkLeader(ctx, ens)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			a := leader
			if role == "follower" {
				a = (leader + 1) % 3
			}
			b, c := others(a)
			t.Logf("holder on server %d (the %s at the start), the other client on servers %d and %d", a, role, b, c)
			q := fmt.Sprintf("?session_timeout=%v", zkSessionTimeout)
			runPartition(t, partitionCase{
				backend:   "zookeeper",
				role:      role,
				holderURL: "zk://" + ens.Members[a].Addr() + q,
				otherURL:  "zk://" + ens.Members[b].Addr() + "," + ens.Members[c].Addr() + q,
				ttl:       zkTTL,
				cut:       func() *testserver.Partition { return ens.Partition(t, a) },
				converged: func(ctx context.Context) error { return zkConverged(ctx, ens) },
				freed: func(ctx context.Context, key string, ready chan<- struct{}) (time.Time, error) {
					return zkFreed(ctx, []string{ens.Members[b].Addr(), ens.Members[c].Addr()}, ready)
				},
			})
		})
	}
}

var (
	zkModeLine = regexp.MustCompile(`(?m)^Mode: (\S+)$`)
	zkZxidLine = regexp.MustCompile(`(?m)^Zxid: (\S+)$`)
)

// zkSrvr returns a server's mode (leader, follower, standalone) and last zxid, from
// the srvr four-letter word.
func zkSrvr(ctx context.Context, addr string) (mode, zxid string, err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, "srvr"); err != nil {
		return "", "", err
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return "", "", err
	}
	m, z := zkModeLine.FindStringSubmatch(string(out)), zkZxidLine.FindStringSubmatch(string(out))
	if m == nil || z == nil {
		return "", "", fmt.Errorf("%s: srvr answered %q", addr, strings.TrimSpace(string(out)))
	}
	return m[1], z[1], nil
}

// zkLeader returns the index of the ensemble's leader.
func zkLeader(ctx context.Context, ens *testserver.Cluster) (int, error) {
	for i, addr := range ens.Endpoints() {
		mode, _, err := zkSrvr(ctx, addr)
		if err != nil {
			return -1, fmt.Errorf("server %d: %w", i, err)
		}
		if mode == "leader" {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no server of %s is the leader", ens.URL())
}

// zkConverged reports nil once every server serves, exactly one leads, and all
// have the same last zxid.
func zkConverged(ctx context.Context, ens *testserver.Cluster) error {
	leaders := 0
	var first string
	for i, addr := range ens.Endpoints() {
		mode, zxid, err := zkSrvr(ctx, addr)
		if err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		switch mode {
		case "leader":
			leaders++
		case "follower":
		default:
			return fmt.Errorf("server %d is %s", i, mode)
		}
		if i == 0 {
			first = zxid
		} else if zxid != first {
			return fmt.Errorf("servers 0 and %d at zxids %s, %s", i, first, zxid)
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d leaders", leaders)
	}
	return nil
}

// quiet is a go-zookeeper logger that drops everything (tests print nothing of
// their own).
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// zkFreed finds the only lock node under the driver's default prefix through
// servers, closes ready, and returns when it saw that node deleted.
func zkFreed(ctx context.Context, servers []string, ready chan<- struct{}) (time.Time, error) {
	conn, events, err := zk.Connect(servers, zkSessionTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		return time.Time{}, err
	}
	done := make(chan struct{})
	go func() { // go-zookeeper's session events, drained until Close closes them
		defer close(done)
		for range events {
		}
	}()
	defer func() { conn.Close(); <-done }()

	node, err := zkOnlyChild(ctx, conn, "/distlock")
	if err == nil {
		node, err = zkOnlyChild(ctx, conn, node)
	}
	if err != nil {
		return time.Time{}, err
	}
	for first := true; ; first = false {
		ok, _, ch, err := conn.ExistsW(node)
		switch {
		case err != nil && first:
			return time.Time{}, err
		case err == nil && !ok:
			return time.Now(), nil
		}
		if first {
			close(ready)
		}
		if err != nil {
			// Disconnected for a moment (the holder's server led): look again.
			select {
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case ev := <-ch:
			if ev.Type == zk.EventNodeDeleted {
				return time.Now(), nil
			}
		}
	}
}

// zkOnlyChild returns the path of the only child of path.
func zkOnlyChild(ctx context.Context, conn *zk.Conn, path string) (string, error) {
	for {
		kids, _, err := conn.Children(path)
		if err == nil {
			if len(kids) != 1 {
				return "", fmt.Errorf("%s has children %q; want one", path, kids)
			}
			return path + "/" + kids[0], nil
		}
		if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
			return "", fmt.Errorf("children of %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("children of %s: %w (%w)", path, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
