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
		firstLine(ctx, "redis-server", "--version"),
		contestants.PostgresVersion(ctx, s.Postgres),
		firstLine(ctx, "etcd", "--version"),
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
