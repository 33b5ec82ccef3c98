package redisdriver

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
	"github.com/distlock/lock/internal/testserver"
)

// A library never prints: through a server crash and restart, with a lock
// held, a waiter queued and the pub/sub connection broken, the driver (and
// go-redis under it, whose default logger writes to stderr) writes nothing.
// The faults run in a child process, whose stderr the test reads.
func TestFaultsPrintNothing(t *testing.T) {
	if os.Getenv("DISTLOCK_NOISE_CHILD") == "1" {
		faultsForNoise(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultsPrintNothing$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DISTLOCK_NOISE_CHILD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the child failed: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("the driver printed to stderr:\n%s", stderr.String())
	}
}

// faultsForNoise is the child's part: faults that make go-redis log.
func faultsForNoise(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, lock.WithTTL(30*time.Second))
	defer lk.Close()
	l, err := lk.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the driver's subscription", d.subscribed)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// Requests to a dead server, then to a new one.
	_, _ = lk.TryAcquire(ctx, "other")
	if err := srv.Restart(false); err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	_ = lk.Close()
	_ = srv.Resume()
}

// A logger the program sets itself (after the driver's init, as main does)
// receives go-redis's lines: the driver silences only the default.
func TestProgramsOwnGoRedisLoggerIsKept(t *testing.T) {
	var rec recorder
	redis.SetLogger(&rec)
	defer redisproto.RouteGoRedis()
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	req := &driver.Request{Key: "k", Owner: "o", TTL: time.Second, Lost: driver.LostFunc(func(error) {})}
	_, _ = d.TryAcquire(ctx, req) // go-redis logs the failed dial
	if rec.lines() == 0 {
		t.Fatal("the program's own logger received no line from go-redis")
	}
}

type recorder struct {
	mu sync.Mutex
	n  int
}

func (r *recorder) Printf(context.Context, string, ...any) {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *recorder) lines() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
