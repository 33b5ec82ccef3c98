package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnvironmentURLComesFirst(t *testing.T) {
	for _, tc := range []struct {
		get func(testing.TB) string
		env string
		url string
	}{
		{Redis, "DISTLOCK_TEST_REDIS_URL", "redis://:secret@redis.example:6379/3"},
		{Postgres, "DISTLOCK_TEST_POSTGRES_URL", "postgres://u:secret@pg.example:5432/db"},
		{Etcd, "DISTLOCK_TEST_ETCD_URL", "etcd://etcd.example:2379"},
		{ZooKeeper, "DISTLOCK_TEST_ZK_URL", "zk://zk.example:2181"},
	} {
		t.Setenv(tc.env, tc.url)
		if got := tc.get(t); got != tc.url {
			t.Errorf("with %s set: got %q, want %q", tc.env, got, tc.url)
		}
	}
}

// childEnv is the environment for a copy of this test binary: no server URLs, no
// Docker, and the given variables.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DISTLOCK_TEST_") || strings.HasPrefix(kv, "DOCKER_HOST=") ||
			strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "DOCKER_HOST=unix:///nonexistent/docker.sock")
	return append(env, extra...)
}

func TestPostgresNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	defer func(glob string) { pgBinGlob = glob }(pgBinGlob)
	pgBinGlob = filepath.Join(t.TempDir(), "*", "bin")
	_, err := startPostgres(nil)
	var missing *notInstalledError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "initdb") {
		t.Fatalf("startPostgres without PostgreSQL: %v; want a notInstalledError naming initdb", err)
	}
}

func TestUnavailableMessage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	b := &backend{name: "Redis", env: "DISTLOCK_TEST_REDIS_URL", example: "redis://127.0.0.1:6379/0",
		start: startRedis, image: redisImage}
	b.startShared()
	var na *unavailableError
	if errors.As(b.err, &na) {
		msg := na.Error()
		for _, want := range []string{"DISTLOCK_TEST_REDIS_URL", "redis-server not found", installHint, "Docker"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q does not mention %q", msg, want)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("message has several lines: %q", msg)
		}
		return
	}
	if dockerAvailable() == nil {
		t.Skip("Docker answers here, so a server was available")
	}
	t.Fatalf("no binary and no Docker: err = %v; want an unavailableError", b.err)
}

// TestServersDieWithTheBinary starts a shared and a private server in a copy of this
// binary, then kills the copy (SIGKILL, or a panic): the servers must go with it.
func TestServersDieWithTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs copies of the test binary")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("needs redis-server")
	}
	for _, how := range []string{"kill", "panic"} {
		t.Run(how, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldServers$", "-test.v")
			cmd.Env = childEnv("PATH="+os.Getenv("PATH"), "DISTLOCK_TESTSERVER_HELPER="+how)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var addrs []string
			scan := bufio.NewScanner(stdout)
			for len(addrs) < 2 && scan.Scan() {
				if addr, ok := strings.CutPrefix(scan.Text(), "ADDR "); ok {
					addrs = append(addrs, addr)
				}
			}
			if len(addrs) < 2 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper printed %d addresses, want 2", len(addrs))
			}
			for _, addr := range addrs {
				if err := redisExpect(t.Context(), addr, "PING", "+PONG"); err != nil {
					t.Fatalf("server %s does not answer while the helper runs: %v", addr, err)
				}
			}
			if how == "kill" {
				cmd.Process.Kill()
			}
			go func() { // drain, so that the helper never blocks on a full pipe
				for scan.Scan() {
				}
			}()
			cmd.Wait()

			deadline := time.Now().Add(10 * time.Second)
			for _, addr := range addrs {
				for {
					c, err := net.DialTimeout("tcp", addr, time.Second)
					if err != nil {
						break
					}
					c.Close()
					if time.Now().After(deadline) {
						t.Fatalf("server %s still answers 10s after its test binary died", addr)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}

			pattern := filepath.Join(tmpBase(), fmt.Sprintf("%s*-%d-*", dirPrefix, cmd.Process.Pid))
			sweep()
			if left, _ := filepath.Glob(pattern); len(left) > 0 {
				t.Fatalf("sweep left the dead binary's directories: %v", left)
			}
		})
	}
}

// TestHelperHoldServers runs only in the copy started by TestServersDieWithTheBinary.
func TestHelperHoldServers(t *testing.T) {
	how := os.Getenv("DISTLOCK_TESTSERVER_HELPER")
	if how == "" {
		t.Skip("helper for TestServersDieWithTheBinary")
	}
	shared := Redis(t)
	fmt.Println("ADDR " + strings.TrimSuffix(strings.TrimPrefix(shared, "redis://"), "/0"))
	fmt.Println("ADDR " + StartRedis(t).Addr())
	if how == "panic" {
		panic("the helper panics, as a buggy test would")
	}
	time.Sleep(time.Hour) // until killed
}
