package servertest

import (
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/distlock/lock/internal/testserver"
)

// TestDockerCompose checks docker-compose.yml, which CI cannot run: the four
// services on their standard loopback ports, with health checks, using the images
// that the Docker source uses.
func TestDockerCompose(t *testing.T) {
	data, err := os.ReadFile("../../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Healthcheck struct {
				Test     []string `yaml:"test"`
				Interval string   `yaml:"interval"`
				Timeout  string   `yaml:"timeout"`
				Retries  int      `yaml:"retries"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true) // a misspelt key is an error, not an ignored line
	if err := dec.Decode(&compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	specs := testserver.Containers()
	want := map[string]struct {
		port string
		spec testserver.ContainerSpec
	}{
		"redis":     {"127.0.0.1:6379:6379", specs["redis"]},
		"postgres":  {"127.0.0.1:5432:5432", specs["postgres"]},
		"etcd":      {"127.0.0.1:2379:2379", specs["etcd"]},
		"zookeeper": {"127.0.0.1:2181:2181", specs["zookeeper"]},
	}
	if len(compose.Services) != len(want) {
		t.Errorf("%d services, want %d", len(compose.Services), len(want))
	}
	for name, w := range want {
		svc, ok := compose.Services[name]
		if !ok {
			t.Errorf("service %s missing", name)
			continue
		}
		if svc.Image != w.spec.Image {
			t.Errorf("%s: image %q, but testserver runs %q", name, svc.Image, w.spec.Image)
		}
		if !slices.Equal(svc.Ports, []string{w.port}) {
			t.Errorf("%s: ports %q, want [%q]", name, svc.Ports, w.port)
		}
		if hc := svc.Healthcheck; len(hc.Test) < 2 || (hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL") ||
			hc.Interval == "" || hc.Retries == 0 {
			t.Errorf("%s: healthcheck %+v; want a CMD test with interval and retries", name, hc)
		}
		for k, v := range w.spec.Env {
			if svc.Environment[k] != v {
				t.Errorf("%s: environment %s=%q, testserver sets %q", name, k, svc.Environment[k], v)
			}
		}
		if w.spec.Cmd != nil && !slices.Equal(svc.Command, w.spec.Cmd) {
			t.Errorf("%s: command %q, testserver runs %q", name, svc.Command, w.spec.Cmd)
		}
	}
}
