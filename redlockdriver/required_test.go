package redlockdriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// Redlock has no fencing tokens: a program that requires them cannot start
// on it. Open fails with ErrUnsupported naming fencing, against real servers.
func TestOpenRequiringFencingFailsOnRedlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := redlockURL(testserver.RedisServers(t, 3))
	lk, err := lock.Open(ctx, u, lock.WithRequired(lock.Capabilities{Fencing: true}))
	if err == nil {
		lk.Close()
		t.Fatal("Open(redlock://) requiring fencing succeeded")
	}
	if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "fencing") {
		t.Fatalf("Open(redlock://) requiring fencing = %v, want ErrUnsupported naming fencing", err)
	}
	// What Redlock has, it may be required to have.
	lk, err = lock.Open(ctx, u, lock.WithRequired(lock.Capabilities{Expiring: true, Shared: true}))
	if err != nil {
		t.Fatalf("Open(redlock://) requiring what it has: %v", err)
	}
	lk.Close()
}
