package testserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
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

// errNoDocker means that no Docker engine answered.
var errNoDocker = errors.New("no Docker engine answered")

var docker struct {
	once sync.Once
	err  error
}

// dockerAvailable asks once whether a Docker engine answers, the way
// testcontainers-go finds one (DOCKER_HOST, ~/.testcontainers.properties, the
// default sockets).
func dockerAvailable() error {
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			docker.err = fmt.Errorf("%w (%s)", errNoDocker, firstLine(err.Error()))
			return
		}
		_ = cli.Close()
	})
	return docker.err
}

// startContainer runs spec and waits until the server answers. stop removes the
// container; testcontainers' reaper removes it too if the test binary dies.
func startContainer(spec containerSpec) (url string, stop func(), err error) {
	if err := dockerAvailable(); err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // includes pulling the image
	defer cancel()
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithExposedPorts(spec.port),
		testcontainers.WithWaitStrategy(wait.ForListeningPort(spec.port).WithStartupTimeout(startTimeout)),
	}
	if spec.env != nil {
		opts = append(opts, testcontainers.WithEnv(spec.env))
	}
	if spec.cmd != nil {
		opts = append(opts, testcontainers.WithCmd(spec.cmd...))
	}
	ctr, err := testcontainers.Run(ctx, spec.image, opts...)
	stop = func() {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
	}
	if err != nil {
		stop()
		return "", nil, err
	}
	addr, err := ctr.PortEndpoint(ctx, spec.port, "")
	if err != nil {
		stop()
		return "", nil, err
	}
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

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
