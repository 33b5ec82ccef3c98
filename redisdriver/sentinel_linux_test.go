package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// startSentinel starts a primary, a replica and one sentinel watching them as
// "mymaster", and returns the redis+sentinel URL and an operator's client of
// the sentinel. The sentinel runs as "redis-server <config> --sentinel" (it
// needs a config file of its own, which testserver's argument list cannot
// give), is killed when the test ends, and dies with the test binary
// (Pdeathsig).
func startSentinel(t *testing.T) (string, *redis.SentinelClient) {
	t.Helper()
	primary := testserver.StartRedis(t)
	_, port, _ := net.SplitHostPort(primary.Addr())
	replica := testserver.StartRedis(t, "--replicaof", "127.0.0.1", port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(t, ctx, "the replica to sync", func() bool {
		info, err := adminClient(t, replica.URL()).Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sport := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(
		"port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %s 1\n"+
			"sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 10000\n",
		sport, dir, port)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	logf, err := os.Create(filepath.Join(dir, "sentinel.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Logf("sentinel log:\n%s", log)
		}
	})
	saddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: saddr})
	t.Cleanup(func() { _ = sentinel.Close() })
	waitFor(t, ctx, "the sentinel to see the replica", func() bool {
		replicas, err := sentinel.Replicas(ctx, "mymaster").Result()
		if err != nil || len(replicas) == 0 {
			return false
		}
		flags := fmt.Sprint(replicas[0]["flags"])
		return flags == "slave"
	})
	return "redis+sentinel://" + saddr + "?master_name=mymaster", sentinel
}

// Through Sentinel the driver locks on the primary; a failover to the replica
// makes the held lock lost (the primary's run_id changed), although the
// replica had received the lock's key, and tokens keep increasing.
func TestSentinelFailoverCountsAsLost(t *testing.T) {
	url, sentinel := startSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, err := lock.Open(ctx, url, lock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	other, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	l, err := lk.Acquire(ctx, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	before := l.Token()
	if _, err := other.TryAcquire(ctx, "ledger"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire by another client through Sentinel = %v, want ErrLocked", err)
	}
	failover := time.Now()
	if err := sentinel.Failover(ctx, "mymaster").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
		t.Logf("Lost() closed %v after SENTINEL FAILOVER", time.Since(failover).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("Lost() still open 15s after the failover")
	}
	if err := l.Refresh(ctx); !errors.Is(err, lock.ErrLost) || !errors.Is(err, ErrServerChanged) {
		t.Errorf("Refresh after the failover = %v, want ErrLost caused by ErrServerChanged", err)
	}
	var l2 *lock.Lock
	waitFor(t, ctx, "the lock on the new primary", func() bool {
		l2, err = other.TryAcquire(ctx, "ledger")
		return err == nil
	})
	if l2.Token() <= before {
		t.Errorf("token %d on the new primary, not above %d", l2.Token(), before)
	}
	_ = l2.Release(ctx)
}

// Through Sentinel a watch tracks its key on the primary, and after a
// failover on the new one (Sentinel disconnects the old primary's clients;
// the watch's client dials the primary Sentinel names): a TryAcquire without
// fencing, which publishes nothing, signals before and after.
func TestSentinelWatchTracksThePrimaryAcrossAFailover(t *testing.T) {
	url, sentinel := startSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, url+"&fencing=false")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	c, err := d.Watch(wctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	hearsAGrant := func(when string) {
		t.Helper()
		req := &driver.Request{Key: "watched", Owner: randomHex(8), TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) {})}
		select {
		case <-c:
		default:
		}
		var err error
		waitFor(t, ctx, "a grant "+when, func() bool {
			_, err = d.TryAcquire(ctx, req)
			return err == nil
		})
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatalf("no signal of a grant %s", when)
		}
		if err := d.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	hearsAGrant("before the failover")
	old, err := sentinel.GetMasterAddrByName(ctx, "mymaster").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := sentinel.Failover(ctx, "mymaster").Err(); err != nil {
		t.Fatal(err)
	}
	var primary *redis.Client
	waitFor(t, ctx, "the watch tracking on the new primary", func() bool {
		addr, err := sentinel.GetMasterAddrByName(ctx, "mymaster").Result()
		if err != nil || addr[1] == old[1] {
			return false
		}
		if primary == nil {
			primary = redis.NewClient(&redis.Options{Addr: net.JoinHostPort(addr[0], addr[1])})
			t.Cleanup(func() { _ = primary.Close() })
		}
		list, err := primary.ClientList(ctx).Result()
		if err != nil {
			return false
		}
		for _, line := range strings.Split(list, "\n") {
			f := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			if strings.Contains(f["flags"], "B") && f["redir"] == f["id"] && f["sub"] == "2" {
				return true
			}
		}
		return false
	})
	hearsAGrant("after the failover")
	wcancel()
	for range c {
	}
}
