package servertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/distlock/lock/internal/testserver"
)

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

// TestMissingServer runs the shared and private tests of each backend in a copy of
// this binary with an empty PATH: they skip, saying what is missing and how to get it,
// and fail with the same message when DISTLOCK_TEST_REQUIRE=1.
func TestMissingServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs copies of the test binary")
	}
	emptyDir := t.TempDir()
	for _, tc := range []struct {
		tests   string
		missing string
	}{
		{"TestRedis|TestStartRedis", "redis-server not found in PATH"},
		{"TestEtcd|TestStartEtcd", "etcd not found in PATH"},
		{"TestZooKeeper|TestStartZooKeeper", "java (for ZooKeeper) not found in PATH"},
	} {
		for _, require := range []bool{false, true} {
			name := fmt.Sprintf("%s/require=%v", strings.Split(tc.tests, "|")[0], require)
			t.Run(name, func(t *testing.T) {
				cmd := exec.Command(os.Args[0], "-test.run=^("+tc.tests+")$", "-test.v", "-test.count=1")
				cmd.Env = childEnv("PATH=" + emptyDir)
				if require {
					cmd.Env = append(cmd.Env, testserver.RequireEnv+"=1")
				}
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				if err != nil && !errors.As(err, &exit) {
					t.Fatal(err)
				}
				verdict := "--- SKIP"
				if require {
					verdict = "--- FAIL"
					if err == nil {
						t.Errorf("tests passed with %s=1 and no server", testserver.RequireEnv)
					}
				} else if err != nil {
					t.Errorf("tests failed without %s: %v", testserver.RequireEnv, err)
				}
				for _, want := range []string{verdict, tc.missing, "sudo scripts/install-backends"} {
					if n := strings.Count(string(out), want); n < 2 {
						t.Errorf("%q appears %d times, want once per test", want, n)
					}
				}
				if t.Failed() {
					t.Logf("output:\n%s", out)
				}
			})
		}
	}
}
