// Package testserver gives tests a real Redis, PostgreSQL, etcd or ZooKeeper server.
//
// # Shared servers
//
// Redis, Postgres, Etcd and ZooKeeper return the URL of a server that all tests of
// the test binary share. The server comes from the first of these that works:
//
//  1. the environment variable DISTLOCK_TEST_REDIS_URL, DISTLOCK_TEST_POSTGRES_URL,
//     DISTLOCK_TEST_ETCD_URL or DISTLOCK_TEST_ZK_URL: a server you already run
//     (for example the one docker-compose.yml at the repository root starts);
//  2. a private server started from the binary installed on this machine
//     (redis-server, PostgreSQL's initdb and postgres, etcd, ZooKeeper's jar run by
//     java) on a free 127.0.0.1 port in its own temporary directory;
//  3. a container started with testcontainers-go, when a Docker engine answers;
//  4. none: the test is skipped with a message that says how to get a server, or
//     fails with that message when DISTLOCK_TEST_REQUIRE=1 (CI sets it).
//
// A private server or container starts on first use and answers before the URL is
// returned. It is stopped when the test binary ends: by Main after the tests ran, and
// on Linux also by the kernel (a parent-death signal) when the binary dies first, from
// a panic, a test timeout, an interrupt or SIGKILL. Every package that uses this one
// should therefore have
//
//	func TestMain(m *testing.M) { leakcheck.VerifyTestMain(testserver.Main(m)) }
//
// The tests share the server, so each test should use its own keys.
//
// # Fault injection
//
// StartRedis, StartPostgres, StartEtcd and StartZooKeeper start a private server that
// belongs to one test and can be stopped, killed, paused and restarted on the same port
// (see Server). EtcdCluster and ZooKeeperEnsemble start a cluster of such servers, and
// RedisServers several independent ones (for Redlock). They need the server binaries:
// an environment URL or a container cannot be paused or restarted by the test.
package testserver

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns "no server available" from a
// skip into a test failure when set to 1 (or true).
const RequireEnv = "DISTLOCK_TEST_REQUIRE"

// installHint is the command that installs every server on Debian or Ubuntu.
const installHint = "sudo scripts/install-backends"

// backend describes one kind of server.
type backend struct {
	name    string // human name: "Redis"
	env     string // environment variable with a URL
	example string // an example value of env, for hints
	start   func(args []string) (*Server, error)
	image   containerSpec

	once sync.Once
	url  string
	took time.Duration
	from string // "redis-server", "Docker"
	err  error  // when no server could be had
}

var (
	redisBackend = &backend{
		name: "Redis", env: "DISTLOCK_TEST_REDIS_URL", example: "redis://127.0.0.1:6379/0",
		start: startRedis, image: redisImage,
	}
	postgresBackend = &backend{
		name: "PostgreSQL", env: "DISTLOCK_TEST_POSTGRES_URL",
		example: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		start:   startPostgres, image: postgresImage,
	}
	etcdBackend = &backend{
		name: "etcd", env: "DISTLOCK_TEST_ETCD_URL", example: "etcd://127.0.0.1:2379",
		start: startEtcd, image: etcdImage,
	}
	zookeeperBackend = &backend{
		name: "ZooKeeper", env: "DISTLOCK_TEST_ZK_URL", example: "zk://127.0.0.1:2181",
		start: startZooKeeper, image: zookeeperImage,
	}
)

// Redis returns the URL of the shared Redis server, redis://127.0.0.1:PORT/0 for a
// private one. See the package documentation for where the server comes from.
func Redis(t testing.TB) string {
	t.Helper()
	return redisBackend.shared(t)
}

// Postgres returns the URL of the shared PostgreSQL server,
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable for a private one
// (trust authentication, no password).
func Postgres(t testing.TB) string {
	t.Helper()
	return postgresBackend.shared(t)
}

// Etcd returns the URL of the shared etcd server, etcd://127.0.0.1:PORT for a
// private one (plain HTTP, no authentication).
func Etcd(t testing.TB) string {
	t.Helper()
	return etcdBackend.shared(t)
}

// ZooKeeper returns the URL of the shared ZooKeeper server, zk://127.0.0.1:PORT for a
// private one. A private server has tickTime=500ms, so sessions may be as short as
// one second (minSessionTimeout) and as long as one minute (maxSessionTimeout).
func ZooKeeper(t testing.TB) string {
	t.Helper()
	return zookeeperBackend.shared(t)
}

// shared returns the URL from the environment, or starts the shared server once.
// The environment is read on every call, so t.Setenv works.
func (b *backend) shared(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(b.env); u != "" {
		return u
	}
	started := false
	b.once.Do(func() {
		started = true
		b.startShared()
	})
	var na *unavailableError
	switch {
	case errors.As(b.err, &na):
		skipOrFail(t, na.Error())
	case b.err != nil:
		t.Fatalf("testserver: %v", b.err)
	case started:
		t.Logf("testserver: shared %s from %s ready in %v", b.name, b.from, b.took.Round(time.Millisecond))
	}
	return b.url
}

// startShared tries a private server, then Docker, and records the outcome.
func (b *backend) startShared() {
	begin := time.Now()
	s, err := b.start(nil)
	if err == nil {
		b.url, b.from, b.took = s.URL(), s.name, time.Since(begin)
		atExit(s.close)
		return
	}
	var missing *notInstalledError
	if !errors.As(err, &missing) {
		// The binary is there but did not give a server: that is a bug to see, not
		// a reason to quietly use something else.
		b.err = err
		return
	}
	url, stop, derr := startContainer(b.image)
	if derr == nil {
		b.url, b.from, b.took = url, "Docker", time.Since(begin)
		atExit(stop)
		return
	}
	if !errors.Is(derr, errNoDocker) {
		b.err = fmt.Errorf("%s in Docker: %w", b.name, derr)
		return
	}
	b.err = &unavailableError{
		msg: fmt.Sprintf("no %s server: %s is not set, %v, and %v; run %q or set %s=%s",
			b.name, b.env, missing, derr, installHint, b.env, b.example),
	}
}

// notInstalledError says which binary or file is missing for a private server.
type notInstalledError struct{ what string }

func (e *notInstalledError) Error() string { return e.what }

// unavailableError says that no source could give a server.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// skipOrFail skips the test with msg, or fails it when DISTLOCK_TEST_REQUIRE=1.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if require, _ := strconv.ParseBool(os.Getenv(RequireEnv)); require {
		t.Fatalf("testserver: %s (failing because %s=1)", msg, RequireEnv)
	}
	t.Skipf("testserver: %s", msg)
}

// startPrivate starts a private server for one test and stops it when the test ends.
// A missing binary skips or fails the test like a missing shared server.
func startPrivate(t testing.TB, b *backend, args []string) *Server {
	t.Helper()
	begin := time.Now()
	s, err := b.start(args)
	var missing *notInstalledError
	switch {
	case errors.As(err, &missing):
		skipOrFail(t, fmt.Sprintf("cannot start a private %s server for this test to control (%s or Docker do not help here): %v; run %q",
			b.name, b.env, missing, installHint))
	case err != nil:
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(s.close)
	t.Logf("testserver: private %s from %s on %s ready in %v", b.name, s.name, s.Addr(), time.Since(begin).Round(time.Millisecond))
	return s
}

// Runner runs a test binary's tests and then stops the shared servers. Main makes
// one; its Run method fits leakcheck.VerifyTestMain.
type Runner struct{ m *testing.M }

// Main wraps m for TestMain so that the shared servers are stopped once the tests
// have run and before the leak check looks for leaked goroutines:
//
//	func TestMain(m *testing.M) { leakcheck.VerifyTestMain(testserver.Main(m)) }
//
// or, without the leak check, os.Exit(testserver.Main(m).Run()).
func Main(m *testing.M) Runner { return Runner{m} }

// Run runs the tests, stops every shared server and returns the exit code.
func (r Runner) Run() int {
	code := r.m.Run()
	runAtExit()
	return code
}

var exitFuncs struct {
	mu  sync.Mutex
	fns []func()
}

// atExit registers fn to run when the tests are done (see Runner.Run).
func atExit(fn func()) {
	exitFuncs.mu.Lock()
	defer exitFuncs.mu.Unlock()
	exitFuncs.fns = append(exitFuncs.fns, fn)
}

func runAtExit() {
	exitFuncs.mu.Lock()
	fns := exitFuncs.fns
	exitFuncs.fns = nil
	exitFuncs.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	stopSpawner()
}
