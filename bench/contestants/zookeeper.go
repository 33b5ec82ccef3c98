package contestants

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/bench/harness"
)

func zkContestants(url string, srv *harness.Server) []*harness.Contestant {
	return []*harness.Contestant{
		// zk.Lock has no try form: ours waits too in the uncontended scenario,
		// so both make the same call.
		oursContestant(ZooKeeper, url, srv, false),
		zkLockContestant(url, srv),
	}
}

// zkServer describes a ZooKeeper server: its port and the packets it has
// received (requests and session pings), from the srvr four-letter word.
func zkServer(url string) (*harness.Server, error) {
	h, ports, err := hostAndPorts(url)
	if err != nil {
		return nil, err
	}
	return &harness.Server{Ports: ports, Requests: func(ctx context.Context) (int64, error) {
		return zkReceived(ctx, h)
	}}, nil
}

func zkReceived(ctx context.Context, addr string) (int64, error) {
	out, err := fourLetter(ctx, addr, "srvr")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "Received: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// fourLetter sends a four-letter word and returns the answer.
func fourLetter(ctx context.Context, addr, word string) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, word); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
}

// quiet silences go-zookeeper's logging of every connection event.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// zkLock is go-zookeeper's own zk.Lock recipe (an ephemeral sequential node,
// a watch on the predecessor) on one session per client, at its defaults.
// The session timeout is the lock's TTL here: the client pings every third of
// it. zk.Lock takes no context: a waiting Lock ends only when it holds.
type zkLock struct {
	noTry
	conn *zk.Conn
}

func zkLockContestant(url string, srv *harness.Server) *harness.Contestant {
	return &harness.Contestant{
		Backend: ZooKeeper, Name: "zk.Lock", Setting: "default", Role: harness.Peer,
		Refreshes: true, Server: srv, NoLateness: noLatenessZK,
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			h, err := hostOf(url)
			if err != nil {
				return nil, err
			}
			conn, _, err := zk.Connect([]string{h}, ttlOr(ttl, 10*time.Second),
				zk.WithLogger(quiet{}), zk.WithLogInfo(false))
			if err != nil {
				return nil, err
			}
			return &zkLock{conn: conn}, nil
		},
	}
}

func (z *zkLock) Acquire(ctx context.Context, key string) (harness.Release, error) {
	l := zk.NewLock(z.conn, "/bench-zklock/"+key, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return l.Unlock() }, nil
}

func (z *zkLock) Close() error { z.conn.Close(); return nil }

// ZooKeeperVersion returns the server's version, for the report.
func ZooKeeperVersion(ctx context.Context, url string) string {
	h, err := hostOf(url)
	if err == nil {
		out, _ := fourLetter(ctx, h, "srvr") // no answer: version unknown
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "Zookeeper version: "); ok {
				v, _, _ = strings.Cut(v, "-")
				return "ZooKeeper " + v
			}
		}
	}
	return "ZooKeeper (version unknown)"
}
