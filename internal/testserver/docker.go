package testserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// containerSpec is how to run a server in Docker. docker-compose.yml uses the same
// images (a test checks it).
type containerSpec struct {
	image string
	port  string // the container's client port, "6379/tcp"
	env   map[string]string
	cmd   []string
	url   func(addr string) string
	probe func(ctx context.Context, url, addr string) error
}

var (
	redisImage = containerSpec{
		image: "redis:7-alpine", port: "6379/tcp",
		cmd:   []string{"redis-server", "--save", "", "--appendonly", "no"},
		url:   func(addr string) string { return "redis://" + addr + "/0" },
		probe: func(ctx context.Context, _, addr string) error { return redisAlive(ctx, addr) },
	}
	postgresImage = containerSpec{
		image: "postgres:16-alpine", port: "5432/tcp",
		env:   map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"},
		url:   func(addr string) string { return "postgres://postgres@" + addr + "/postgres?sslmode=disable" },
		probe: func(ctx context.Context, url, _ string) error { return pgPing(ctx, url) },
	}
	etcdImage = containerSpec{
		image: "quay.io/coreos/etcd:v3.5.17", port: "2379/tcp",
		cmd: []string{"etcd", "--name=etcd", "--data-dir=/etcd-data",
			"--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://127.0.0.1:2379"},
		url:   func(addr string) string { return "etcd://" + addr },
		probe: func(ctx context.Context, _, addr string) error { return etcdHealth(ctx, "http://"+addr) },
	}
	zookeeperImage = containerSpec{
		image: "zookeeper:3.8", port: "2181/tcp",
		env:   map[string]string{"ZOO_4LW_COMMANDS_WHITELIST": "ruok,srvr,stat"},
		url:   func(addr string) string { return "zk://" + addr },
		probe: func(ctx context.Context, _, addr string) error { return zkServing(ctx, addr) },
	}
)

// ContainerSpec is how the Docker source runs one server, for the test that
// holds docker-compose.yml to the same images.
type ContainerSpec struct {
	Image string
	Env   map[string]string
	Cmd   []string
}

// Containers returns the Docker source's servers by kind.
func Containers() map[string]ContainerSpec {
	out := map[string]ContainerSpec{}
	for kind, s := range map[string]containerSpec{"redis": redisImage, "postgres": postgresImage, "etcd": etcdImage, "zookeeper": zookeeperImage} {
		out[kind] = ContainerSpec{Image: s.image, Env: s.env, Cmd: s.cmd}
	}
	return out
}

// errNoDocker means that no Docker engine answered.
var errNoDocker = errors.New("no Docker engine answered")

var docker struct {
	once sync.Once
	err  error
}

// dockerAvailable asks once whether a Docker engine answers the docker CLI
// (which finds it through DOCKER_HOST, its contexts and the default socket).
// The CLI rather than a Go client keeps the modules' requirements free of
// Docker's (see internal/leakcheck for why that matters).
func dockerAvailable() error {
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput()
		if err != nil {
			docker.err = fmt.Errorf("%w (%s)", errNoDocker, firstLine(strings.TrimSpace(string(out))+" "+err.Error()))
		}
	})
	return docker.err
}

// containerLabel marks the containers testserver starts: a test binary
// killed before its cleanup leaves them, and
// `docker rm -f $(docker ps -q --filter label=distlock.testserver)` removes them.
const containerLabel = "distlock.testserver"

// startContainer runs spec and waits until the server answers. stop removes the
// container.
func startContainer(spec containerSpec) (url string, stop func(), err error) {
	if err := dockerAvailable(); err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // includes pulling the image
	defer cancel()
	args := []string{"run", "-d", "--rm", "--label", containerLabel, "-p", "127.0.0.1::" + spec.port}
	for k, v := range spec.env {
		args = append(args, "-e", k+"="+v)
	}
	args = append(append(args, spec.image), spec.cmd...)
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		return "", nil, fmt.Errorf("docker run %s: %w%s", spec.image, err, stderrOf(err))
	}
	id := strings.TrimSpace(string(out))
	stop = func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = exec.CommandContext(sctx, "docker", "rm", "-f", id).Run()
	}
	out, err = exec.CommandContext(ctx, "docker", "port", id, spec.port).Output()
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("docker port %s: %w%s", spec.image, err, stderrOf(err))
	}
	addr := firstLine(strings.TrimSpace(string(out)))
	url = spec.url(addr)
	// The port opens before some servers answer (PostgreSQL's image restarts after
	// initialising), so probe like a private server.
	deadline := time.Now().Add(startTimeout)
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err = spec.probe(pctx, url, addr)
		pcancel()
		if err == nil {
			return url, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("container %s on %s did not answer within %v: %w", spec.image, addr, startTimeout, err)
		}
		time.Sleep(probeInterval)
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + firstLine(strings.TrimSpace(string(ee.Stderr)))
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
