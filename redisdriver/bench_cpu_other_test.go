//go:build !linux

package redisdriver

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// processCPU is unknown here: the CPU metrics are left out.
func processCPU() time.Duration { return 0 }

// serverCPUClock is nil here: the server's CPU time is unknown.
func serverCPUClock(context.Context, *redis.Client) func() time.Duration { return nil }
