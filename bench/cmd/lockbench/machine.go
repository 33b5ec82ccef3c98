package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/distlock/lock/bench/contestants"
	"github.com/distlock/lock/bench/harness"
)

// describe says what machine and servers the run used.
func describe(ctx context.Context, s contestants.Servers) harness.Machine {
	m := harness.Machine{CPU: cpuModel(), CPUs: runtime.NumCPU(), OS: osName(), Go: runtime.Version()}
	m.Servers = strings.Join([]string{
		"Redis " + field(firstLine(ctx, "redis-server", "--version"), "v="),
		contestants.PostgresVersion(ctx, s.Postgres),
		"etcd " + field(firstLine(ctx, "etcd", "--version"), "Version: "),
		contestants.ZooKeeperVersion(ctx, s.ZooKeeper),
	}, "; ")
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func osName() string {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

func firstLine(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return name + " (version unknown)"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// field returns what follows prefix in line, up to the next space ("v=7.0.15
// sha=..." gives 7.0.15), or line when prefix is not in it.
func field(line, prefix string) string {
	_, rest, ok := strings.Cut(line, prefix)
	if !ok {
		return line
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}

// loadAverage returns the one-minute load average, "?" where unknown.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	one, _, _ := strings.Cut(string(data), " ")
	return one
}
