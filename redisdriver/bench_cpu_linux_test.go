package redisdriver

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPUClock returns a function that reads the CPU time the Redis
// server of c has used, or nil when this machine cannot see it (the server
// runs elsewhere, or in another PID namespace).
func serverCPUClock(ctx context.Context, c *redis.Client) func() time.Duration {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	pid := 0
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || !strings.Contains(string(comm), "-server") {
		return nil
	}
	path := fmt.Sprintf("/proc/%d/schedstat", pid) // the first field: ns on a CPU
	return func() time.Duration {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		f, _, _ := strings.Cut(string(b), " ")
		ns, _ := strconv.ParseInt(f, 10, 64)
		return time.Duration(ns)
	}
}
