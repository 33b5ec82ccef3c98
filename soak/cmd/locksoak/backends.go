package main

import (
	"context"
	"fmt"
	"math/rand"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/soak/check"
	"github.com/distlock/lock/soak/run"
)

type config struct {
	name          string
	keys, clients int
	dur, ttl      time.Duration
	seed          int64
	out, exe      string
}

type backend struct {
	// ttl is the default lock TTL: short, to make many holds and losses,
	// and within what the backend allows (etcd's minimum lease TTL; below
	// ZooKeeper's session timeout, which ends a frozen holder's session).
	ttl time.Duration
	run func(ctx context.Context, c config) (*run.Summary, error)
}

var backends = map[string]backend{
	"mem":       {300 * time.Millisecond, runMem},
	"file":      {300 * time.Millisecond, runFile},
	"redis":     {300 * time.Millisecond, runRedis},
	"redlock":   {300 * time.Millisecond, runRedlock},
	"postgres":  {500 * time.Millisecond, func(ctx context.Context, c config) (*run.Summary, error) { return runServer(ctx, c, "postgres") }},
	"etcd":      {2 * time.Second, func(ctx context.Context, c config) (*run.Summary, error) { return runServer(ctx, c, "etcd") }},
	"zookeeper": {2 * time.Second, func(ctx context.Context, c config) (*run.Summary, error) { return runServer(ctx, c, "zookeeper") }},
	"etcd-cluster": {2 * time.Second, func(ctx context.Context, c config) (*run.Summary, error) {
		return runCluster(ctx, c, "etcd")
	}},
	"zookeeper-cluster": {2 * time.Second, func(ctx context.Context, c config) (*run.Summary, error) {
		return runCluster(ctx, c, "zookeeper")
	}},
}

func (c config) processes(rawURL string, upstreams []string, faults ...run.ServerFault) run.Processes {
	return run.Processes{Name: c.name, URL: rawURL, Upstreams: upstreams, Command: []string{c.exe},
		Clients: c.clients, Keys: c.keys, TTL: c.ttl, Duration: c.dur, Seed: c.seed, Out: c.out, ServerFaults: faults}
}

// runMem: clients are goroutines sharing one in-memory store; the nemesis
// cuts one client's calls off at a time.
func runMem(ctx context.Context, c config) (*run.Summary, error) {
	u, _ := url.Parse(fmt.Sprintf("mem://soak-%d", c.seed))
	open, _ := driver.Lookup("mem")
	p := run.InProcess{Name: c.name, Clients: c.clients, Keys: c.keys, TTL: c.ttl, Duration: c.dur, Seed: c.seed, Out: c.out,
		NewDriver: func() (driver.Driver, error) { return open(ctx, driver.Config{URL: u}) }}
	return p.Run(ctx)
}

func runFile(ctx context.Context, c config) (*run.Summary, error) {
	dir, err := os.MkdirTemp("", "locksoak-file-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	return c.processes("file://"+dir, nil).Run(ctx)
}

// freeze pauses one server for up to twice the TTL.
func freeze(s *testserver.Server, ttl time.Duration) run.ServerFault {
	return run.ServerFault{Name: "server-freeze", Inject: func(ctx context.Context, rng *rand.Rand, _ func(check.Op)) error {
		if err := s.Pause(); err != nil {
			return err
		}
		t := time.NewTimer(time.Duration(rng.Int63n(int64(2 * ttl))))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		return s.Resume()
	}}
}

// restart restarts a server; when that loses the locks (a Redis without its
// data; PostgreSQL, whose advisory locks die with their sessions), the loss
// is recorded: until their holders learn of it, only fencing protects.
func restart(name string, s *testserver.Server, keepData, losesLocks bool) run.ServerFault {
	return run.ServerFault{Name: name, Inject: func(_ context.Context, _ *rand.Rand, record func(check.Op)) error {
		call := time.Now().UnixNano()
		err := s.Restart(keepData)
		if losesLocks {
			record(check.Op{Kind: check.Forget, Client: -1, Call: call, Return: time.Now().UnixNano()})
		}
		return err
	}}
}

func launch(kind string) (*testserver.Server, error) {
	s, err := testserver.Launch(kind)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", kind, err)
	}
	return s, nil
}

func runRedis(ctx context.Context, c config) (*run.Summary, error) {
	s, err := launch("redis")
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return c.processes(s.URL(), []string{s.Addr()},
		freeze(s, c.ttl),
		restart("server-restart-empty", s, false, true),
	).Run(ctx)
}

// runRedlock: three servers. One of them is frozen, or crashes and comes
// back empty only after the TTL (the delayed restart the Redlock algorithm
// prescribes: every lock it had has expired by then, so its loss cannot
// give a second majority).
func runRedlock(ctx context.Context, c config) (*run.Summary, error) {
	var servers []*testserver.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	q := url.Values{}
	var ups []string
	for range 3 {
		s, err := launch("redis")
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
		q.Add("server", s.URL())
		ups = append(ups, s.Addr())
	}
	// pick chooses a server and notes which in the history.
	pick := func(rng *rand.Rand, r func(check.Op), what string) *testserver.Server {
		s := servers[rng.Intn(len(servers))]
		t := time.Now().UnixNano()
		r(check.Op{Kind: check.Fault, Client: -1, Key: what + " " + s.Addr(), Call: t, Return: t})
		return s
	}
	freezeOne := run.ServerFault{Name: "server-freeze", Inject: func(ctx context.Context, rng *rand.Rand, r func(check.Op)) error {
		return freeze(pick(rng, r, "server-freeze"), c.ttl).Inject(ctx, rng, r)
	}}
	delayed := run.ServerFault{Name: "server-crash-delayed-restart-empty", Inject: func(ctx context.Context, rng *rand.Rand, r func(check.Op)) error {
		s := pick(rng, r, "server-crash")
		if err := s.Kill(); err != nil {
			return err
		}
		t := time.NewTimer(c.ttl + driver.Drift(c.ttl))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		return s.Restart(false)
	}}
	p := c.processes("redlock://?"+q.Encode(), ups, freezeOne, delayed)
	p.Unfenced = true // Redlock gives no fencing tokens
	return p.Run(ctx)
}

// runServer: one PostgreSQL, etcd or ZooKeeper server, frozen or restarted
// with its data (etcd's leases and ZooKeeper's sessions survive that;
// PostgreSQL's advisory locks do not).
func runServer(ctx context.Context, c config, kind string) (*run.Summary, error) {
	s, err := launch(kind)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	u := s.URL()
	if kind == "zookeeper" {
		// The shortest session ZooKeeper grants by default (2 ticks): a
		// frozen client's session ends soon after its TTL.
		u += sep(u) + "session_timeout=4s"
	}
	return c.processes(u, []string{s.Addr()},
		freeze(s, c.ttl),
		restart("server-restart", s, true, kind == "postgres"),
	).Run(ctx)
}

func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

// runCluster: three etcd members or ZooKeeper servers, clients spread over
// them through their proxies. The nemesis cuts one member off from the other
// two (a real partition, iptables: needs root), long enough for leases and
// sessions to end on the majority's side; freezes one; or restarts one with its
// data.
func runCluster(ctx context.Context, c config, kind string) (*run.Summary, error) {
	var args []string
	if kind == "etcd" {
		// etcd's default from 3.5: a member coming back from a partition does
		// not force an election (the Debian etcd is 3.4).
		args = []string{"--pre-vote"}
	}
	cl, err := testserver.LaunchCluster(kind, 3, args...)
	if err != nil {
		return nil, fmt.Errorf("starting a %s cluster: %w", kind, err)
	}
	defer cl.Close()
	u := cl.URL()
	if kind == "zookeeper" {
		u += sep(u) + "session_timeout=4s"
	}
	pick := func(rng *rand.Rand, r func(check.Op), what string) int {
		i := rng.Intn(len(cl.Members))
		t := time.Now().UnixNano()
		r(check.Op{Kind: check.Fault, Client: -1, Key: what + " " + cl.Members[i].Addr(), Call: t, Return: t})
		return i
	}
	wait := func(ctx context.Context, d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	partition := run.ServerFault{Name: "member-partition", Inject: func(ctx context.Context, rng *rand.Rand, r func(check.Op)) error {
		p, err := cl.Cut(pick(rng, r, "member-partition"))
		if err == nil {
			// Past the TTL and ZooKeeper's 4 s session, up to three TTLs.
			wait(ctx, 2*c.ttl+time.Duration(rng.Int63n(int64(c.ttl))))
		}
		if p != nil {
			if herr := p.Heal(); err == nil {
				err = herr
			}
		}
		return err
	}}
	freezeOne := run.ServerFault{Name: "member-freeze", Inject: func(ctx context.Context, rng *rand.Rand, r func(check.Op)) error {
		return freeze(cl.Members[pick(rng, r, "member-freeze")], c.ttl).Inject(ctx, rng, r)
	}}
	restartOne := run.ServerFault{Name: "member-restart", Inject: func(_ context.Context, rng *rand.Rand, r func(check.Op)) error {
		return cl.Members[pick(rng, r, "member-restart")].Restart(true)
	}}
	return c.processes(u, cl.Endpoints(), partition, freezeOne, restartOne).Run(ctx)
}
