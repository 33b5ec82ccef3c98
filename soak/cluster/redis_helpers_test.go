package cluster

// Helpers of the Redis scenarios (Sentinel and Redlock). Their names start
// with "redis" so that the other backends' helpers in this package cannot
// collide with them.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// redisStep bounds every wait for one step of a scenario: generous, because a
// loaded 2-core machine can stall a step for seconds, and the waits end as soon
// as their condition holds.
const redisStep = 30 * time.Second

// redisContext is a test's context, bounded so that a stuck scenario fails
// rather than hangs.
func redisContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// redisFigure logs a measured duration as the docs quote it:
// "figure <what> <backend> <duration>".
func redisFigure(t *testing.T, what, backend string, d time.Duration) {
	t.Helper()
	t.Logf("figure %s %s %v", what, backend, d.Round(100*time.Microsecond))
}

// redisDialProbesEnd arranges for the end of t (after its lockers and
// servers are closed) to wait until no go-redis dial probe is left, and logs
// how long one outlived the cleanup. go-redis stops dialling a server after
// PoolSize (10 × GOMAXPROCS) dials in a row failed, and probes it from a
// goroutine that sleeps a second between attempts and notices a closed client
// only after its sleep; the drivers' retried rounds against a stopped server
// start it. Bounded here at 3s so that a probe that never ends still fails
// the test, as goleak would.
func redisDialProbesEnd(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		start := time.Now()
		for probing := redisDialProbing(); probing; probing = redisDialProbing() {
			if time.Since(start) > 3*time.Second {
				t.Errorf("a go-redis dial probe (ConnPool.tryDial) still runs %v after the clients were closed", time.Since(start))
				return
			}
			time.Sleep(10 * time.Millisecond) // polling the goroutine list: nothing to wait on
		}
		if d := time.Since(start); d > 10*time.Millisecond {
			redisFigure(t, "go-redis-dial-probe-outlived-close", "redis", d)
		}
	})
}

// redisDialProbing reports whether a go-redis dial probe goroutine runs.
func redisDialProbing() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), "(*ConnPool).tryDial")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// redisWait polls cond until it holds, failing the test if it does not within
// redisStep (or ctx's end). It orders the test's steps on what the servers
// report, never on a sleep.
func redisWait(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, redisStep)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// redisAdmin is a plain client of one server, playing the operator; closed
// with the test.
func redisAdmin(t *testing.T, s *testserver.Server) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	// One attempt per command: a test that asks a stopped server must learn
	// it at once, not after go-redis's retries.
	o.MaxRetries = -1
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisLockKey is where both Redis drivers keep the lock of key under the
// default prefix (see their package documentation's key layout).
func redisLockKey(key string) string { return "distlock:{" + key + "}" }

// redisFence is the resource the locks protect, as a fenced store models it:
// it accepts a write if and only if its token is at least the largest token it
// has seen, and remembers that token.
type redisFence struct {
	mu      sync.Mutex
	largest uint64
}

// write reports whether a write with token is accepted.
func (f *redisFence) write(token uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.largest {
		return false
	}
	f.largest = token
	return true
}

// redisGrant is what a contender's Acquire returned, and when.
type redisGrant struct {
	l   *lock.Lock
	err error
	at  time.Time
	// Whether the earlier holder's Lost had closed when the Acquire
	// returned: read in the contender's goroutine at once, so that no
	// measurement noise can order the two.
	aLost bool
}

// redisLostAt notes when ch closes, from a goroutine that waits for it, so
// that the moment is measured when it happens rather than when the test
// looks. The function it returns gives that moment; call it once ch has
// closed (it waits for the note). The goroutine ends with ctx.
func redisLostAt(ctx context.Context, ch <-chan struct{}) func() time.Time {
	var at time.Time
	noted := make(chan struct{})
	go func() {
		select {
		case <-ch:
			at = time.Now()
			close(noted)
		case <-ctx.Done():
		}
	}()
	return func() time.Time {
		select {
		case <-noted:
			return at
		case <-ctx.Done():
			return time.Time{}
		}
	}
}

// redisSentinel is a primary, its replica and one sentinel watching them as
// "mymaster".
type redisSentinel struct {
	url      string // redis+sentinel URL of the primary named mymaster
	primary  *testserver.Server
	replica  *testserver.Server
	sentinel *redis.SentinelClient
}

// startRedisSentinel starts a primary, a replica in sync with it, and a
// sentinel that knows both (the approach of redisdriver's
// sentinel_linux_test.go). The sentinel runs as "redis-server <config>
// --sentinel", as it needs a config file of its own, which testserver's
// argument list cannot give; it is killed when the test ends and dies with
// the test binary (Pdeathsig).
//
// Its down-after-milliseconds is a minute: the test decides when to fail over
// (SENTINEL FAILOVER), so that a replica the test froze is not judged down and
// an automatic failover started meanwhile cannot end without a replica to
// promote (Sentinel would not try again for twice the failover timeout).
func startRedisSentinel(t *testing.T, ctx context.Context) *redisSentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("DISTLOCK_TEST_REQUIRE") == "1" {
			t.Fatal("redis-server not found in PATH")
		}
		t.Skip("redis-server not found in PATH; run scripts/install-backends")
	}
	primary := testserver.StartRedis(t)
	_, port, _ := net.SplitHostPort(primary.Addr())
	replica := testserver.StartRedis(t, "--replicaof", "127.0.0.1", port)
	radmin := redisAdmin(t, replica)
	redisWait(t, ctx, "the replica to sync", func() bool {
		info, err := radmin.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sport := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(
		"port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %s 1\n"+
			"sentinel down-after-milliseconds mymaster 60000\nsentinel failover-timeout mymaster 60000\n",
		sport, dir, port)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	logf, err := os.Create(filepath.Join(dir, "sentinel.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Logf("sentinel log:\n%s", log)
		}
	})
	saddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: saddr, MaxRetries: -1})
	t.Cleanup(func() { _ = sentinel.Close() })
	redisWait(t, ctx, "the sentinel to see the replica", func() bool {
		replicas, err := sentinel.Replicas(ctx, "mymaster").Result()
		return err == nil && len(replicas) == 1 && fmt.Sprint(replicas[0]["flags"]) == "slave"
	})
	return &redisSentinel{
		url:      "redis+sentinel://" + saddr + "?master_name=mymaster",
		primary:  primary,
		replica:  replica,
		sentinel: sentinel,
	}
}

// redlockURL is the redlock URL of servers (see redlockdriver's package
// documentation: one server parameter per server, each a go-redis URL).
func redlockURL(servers []*testserver.Server) string {
	q := make([]string, len(servers))
	for i, s := range servers {
		q[i] = "server=" + url.QueryEscape(s.URL())
	}
	return "redlock://?" + strings.Join(q, "&")
}
