// Package contestants adapts each lock library in the comparison to
// harness.Client, one file per library, and lists them per backend with the
// performance targets our drivers' issues set.
package contestants

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/bench/harness"
)

// Servers are the URLs of the private servers a run uses.
type Servers struct {
	Redis     string   // redis://127.0.0.1:PORT/0
	Redlock   []string // three independent Redis servers
	Postgres  string   // postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
	Etcd      string   // etcd://127.0.0.1:PORT
	ZooKeeper string   // zk://127.0.0.1:PORT
	File      string   // file:///DIR, a directory of its own; "" leaves the file driver out
}

// Backend names, the groups contestants are compared within.
const (
	Redis     = "Redis"
	Redlock   = "Redlock over 3 Redis"
	Postgres  = "PostgreSQL"
	Etcd      = "etcd"
	ZooKeeper = "ZooKeeper"
	Mem       = "mem (in-process)"
	File      = "file (flock)"
)

// Contestant labels used by the targets.
const (
	oursLabel = "distlock"
	floorName = "raw floor"
	// noFenceSetting is the setting of our Redis driver without fencing;
	// noFenceLabel its label.
	noFenceSetting = "fencing=false"
	noFenceLabel   = oursLabel + " (" + noFenceSetting + ")"
	// redislockDefault is bsm/redislock's label at its default.
	redislockDefault = "bsm/redislock (default: no retry)"
)

// defaultTTL is the lock TTL of libraries that need one when the scenario does
// not set it: distlock's default.
const defaultTTL = 30 * time.Second

// All returns every contestant for the given servers, grouped by backend: ours
// first, then the raw floor, then the peers at default and tuned settings.
func All(s Servers) ([]*harness.Contestant, error) {
	redisSrv, err := redisServer(s.Redis)
	if err != nil {
		return nil, err
	}
	redlockSrv, err := redisServer(s.Redlock...)
	if err != nil {
		return nil, err
	}
	pgSrv, err := postgresServer(s.Postgres)
	if err != nil {
		return nil, err
	}
	etcdSrv, err := etcdServer(s.Etcd)
	if err != nil {
		return nil, err
	}
	zkSrv, err := zkServer(s.ZooKeeper)
	if err != nil {
		return nil, err
	}
	var cs []*harness.Contestant
	cs = append(cs, redisContestants(s.Redis, redisSrv)...)
	cs = append(cs, redlockContestants(s.Redlock, redlockSrv)...)
	cs = append(cs, postgresContestants(s.Postgres, pgSrv)...)
	cs = append(cs, etcdContestants(s.Etcd, etcdSrv)...)
	cs = append(cs, zkContestants(s.ZooKeeper, zkSrv)...)
	// The local drivers are the reference implementation (mem) and the
	// single-host one (file): shapes only, nothing to compare with.
	cs = append(cs, oursLocal(Mem, "mem://bench"))
	if s.File != "" {
		cs = append(cs, oursLocal(File, s.File))
	}
	for _, c := range cs {
		if why, ok := noShapes[c.ID()]; ok {
			c.NA = withNA(c.NA, why)
		}
	}
	return cs, nil
}

// noShapes says, per contestant, why it has neither a read-write lock nor a
// semaphore. Our drivers are not listed: they run the shape scenarios when
// their Capabilities say they can (harness.ErrUnsupported otherwise).
var noShapes = map[string]string{
	Redis + "/" + floorName + " (SET NX PX + compare-and-delete)": "the mutex floor; the read-write and semaphore recipes are rows of their own",
	Redis + "/" + redislockDefault:                                "bsm/redislock has mutexes only",
	Redis + "/bsm/redislock (tuned: 1 ms linear backoff)":         "bsm/redislock has mutexes only",
	Redis + "/redsync (default: 50–250 ms retry delay)":           "redsync has mutexes only",
	Redis + "/" + redsyncTunedLabel:                               "redsync has mutexes only",
	Redlock + "/redsync (default: 50–250 ms retry delay)":         "redsync has mutexes only",
	Redlock + "/" + redsyncTunedLabel:                             "redsync has mutexes only",
	Etcd + "/" + floorName + " (Put + Delete)":                    "a plain Put excludes nobody",
	Etcd + "/" + mutexLabel:                                       "concurrency.Mutex is exclusive (etcd's read-write lock is recipe.RWMutex, a row of its own; etcd's client has no semaphore)",
	ZooKeeper + "/zk.Lock (default)":                              "go-zookeeper has zk.Lock only: no read-write lock and no semaphore (Curator's InterProcessReadWriteLock and InterProcessSemaphoreV2 are Java)",
}

// withNA returns na with both shape scenarios n/a for why, in a new map
// (contestants may share one).
func withNA(na map[harness.Scenario]string, why string) map[harness.Scenario]string {
	out := map[harness.Scenario]string{harness.ReadHeavy: why, harness.Semaphore: why}
	for k, v := range na {
		out[k] = v
	}
	return out
}

// Targets are the performance targets the driver issues (#4 Redis, #5
// PostgreSQL, #6 etcd, #8 Redlock) and the performance rounds (#23, #42: the
// shapes, Redlock and etcd handoffs) set, as checks on a run.
func Targets() []harness.Target {
	return []harness.Target{
		{Issue: "#4", Backend: Redis, Ours: oursLabel, Of: floorName, Metric: harness.UncMean, Max: true, Bound: 1.15,
			Text: "uncontended acquire+release with fencing at most 1.15× the raw SET NX PX + compare-and-delete floor"},
		{Issue: "#23", Backend: Redis, Ours: noFenceLabel, Of: floorName, Metric: harness.UncMean, Max: true, Bound: 1.05,
			Text: "uncontended acquire+release with fencing=false at most 1.05× the raw SET NX PX + compare-and-delete floor"},
		{Issue: "#23", Backend: Redis, Ours: noFenceLabel, Of: redislockDefault, Metric: harness.UncMean, Max: true, Bound: 0.95,
			Text: "uncontended acquire+release with fencing=false at most 0.95× bsm/redislock at its default"},
		{Issue: "#4", Backend: Redis, Ours: oursLabel, Metric: harness.Handoffs, Bound: 4000,
			Text: "contended, 8 goroutines over 2 Lockers: at least 4,000 handoffs/s"},
		{Issue: "#4", Backend: Redis, Ours: oursLabel, Metric: harness.MinShare, Bound: 0.5,
			Text: "contended: no waiter below half its fair share"},
		{Issue: "#5", Backend: Postgres, Ours: oursLabel, Of: floorName, Metric: harness.Handoffs, Bound: 0.8,
			Text: "contended at least 0.8× the handoffs/s of raw pg_advisory_lock/unlock on pinned connections"},
		{Issue: "#5", Backend: Postgres, Ours: oursLabel, Of: floorName, Metric: harness.UncMean, Max: true, Bound: 1.2,
			Text: "uncontended at most 1.2× raw pg_try_advisory_lock + unlock"},
		{Issue: "#5", Backend: Postgres, Ours: oursLabel, Metric: harness.HeldConns, Max: true, Bound: 8,
			Text: "10,000 held locks on at most a handful of connections (taken here as at most 8: the scenario takes its locks from 8 goroutines at once)"},
		{Issue: "#6", Backend: Etcd, Ours: oursLabel, Of: mutexLabel, Metric: harness.Handoffs, Bound: 10,
			Text: "contended at least 10× the handoffs/s of concurrency.Mutex with a session per goroutine"},
		{Issue: "#6", Backend: Etcd, Ours: oursLabel, Of: mutexLabel, Metric: harness.UncMean, Max: true, Bound: 1,
			Text: "uncontended no slower than concurrency.Mutex Lock+Unlock (the Put+Delete floor is in the table)"},
		{Issue: "#8, #42", Backend: Redlock, Ours: oursLabel, Of: redsyncTunedLabel, Metric: harness.Handoffs, Bound: 3,
			Text: "contended at least 3× redsync's Redlock over the same 3 servers with a 1 ms retry delay"},
		{Issue: "#42", Backend: Etcd, Ours: oursLabel, Of: mutexLabel, Metric: harness.Handoffs, Bound: 8,
			Text: "contended at least 8× the handoffs/s of concurrency.Mutex on this machine (#6's 10× stands as the goal beyond it)"},
		{Issue: "#42", Backend: Redis, Ours: oursLabel, Of: "raw read-write", Metric: harness.RWOps, Bound: 1,
			Text: "read-heavy (90% readers, 16 goroutines, 500 µs holds) at least the ops/s of a raw Redisson-layout read-write recipe, writer preference kept"},
		{Issue: "#42", Backend: Redis, Ours: oursLabel, Of: "raw semaphore", Metric: harness.SemOps, Bound: 1.1,
			Text: "semaphore (4 permits, 16 goroutines) at least 1.1× the ops/s of the Redis in Action fair semaphore"},
		{Issue: "#42", Backend: Postgres, Ours: oursLabel, Of: "raw semaphore", Metric: harness.SemOps, Bound: 1,
			Text: "semaphore (4 permits, 16 goroutines) at least the ops/s of a raw n-id pg_try_advisory_lock loop"},
	}
}

// serverPorts returns the ports of host:port addresses.
func serverPorts(addrs ...string) ([]int, error) {
	var ports []int
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		ports = append(ports, n)
	}
	return ports, nil
}

// hostAndPorts is the host:port of a single-server URL and its port.
func hostAndPorts(raw string) (string, []int, error) {
	h, err := hostOf(raw)
	if err != nil {
		return "", nil, err
	}
	ports, err := serverPorts(h)
	return h, ports, err
}

// hostOf returns host:port of a URL.
func hostOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("server URL: %w", err)
	}
	return u.Host, nil
}

// ownerSeq makes owner tokens unique within the process, as cheaply as the
// floors can: the floors measure the protocol, not token generation.
var ownerSeq atomic.Uint64

func nextOwner() string { return strconv.FormatUint(ownerSeq.Add(1), 36) }

// ttlOr returns ttl, or def when ttl is 0.
func ttlOr(ttl, def time.Duration) time.Duration {
	if ttl <= 0 {
		return def
	}
	return ttl
}

// noTry is embedded by adapters of libraries without a non-blocking attempt.
type noTry struct{}

func (noTry) TryAcquire(context.Context, string) (harness.Release, error) {
	return nil, harness.ErrNoTry
}
