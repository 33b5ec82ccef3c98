package redisdriver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// A program that needs fencing tokens cannot start on a Redis with fencing
// turned off: Open fails with ErrUnsupported naming fencing, before any lock
// is taken. With fencing on, the same requirement opens.
func TestOpenRequiringFencingFailsOnRedisWithoutFencing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testserver.Redis(t)
	required := lock.WithRequired(lock.Capabilities{Fencing: true})
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	lk, err := lock.Open(ctx, url+sep+"fencing=false", required)
	if err == nil {
		lk.Close()
		t.Fatal("Open(fencing=false) requiring fencing succeeded")
	}
	if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "fencing") {
		t.Fatalf("Open(fencing=false) requiring fencing = %v, want ErrUnsupported naming fencing", err)
	}
	lk, err = lock.Open(ctx, url, required)
	if err != nil {
		t.Fatalf("Open with fencing on, requiring it: %v", err)
	}
	defer lk.Close()
	l, err := lk.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() == 0 {
		t.Fatal("a lock from a Locker that requires fencing has token 0")
	}
}
