package cluster

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/redisdriver"
)

// A Sentinel failover to a replica that never received the lock's key
// (replication is asynchronous) loses the lock: the new primary does not have
// it and grants it to another client at once. The old holder learns it
// (Lost closes, bounded), and fencing still tells the two apart: the new
// holder's token is larger, although the new primary lost the fence record,
// because tokens are never below the server's clock in microseconds; a fenced
// resource then rejects the old holder's writes.
//
// The replica misses the key this way: it is frozen (SIGSTOP) and the primary
// drops its replication link (CLIENT KILL TYPE replica), so it cannot come back
// for what it missed; the holder then acquires, and the primary is killed
// before the replica resumes. Freezing alone would not do: the primary's
// writes wait in the frozen replica's socket buffer and are applied when it
// resumes.
func TestSentinelFailoverThatLosesTheKeyEndsTheHolderAndKeepsFencing(t *testing.T) {
	const (
		backend = "redis-sentinel"
		key     = "ledger"
		ttl     = 3 * time.Second
	)
	redisDialProbesEnd(t)
	ctx := redisContext(t)
	rs := startRedisSentinel(t, ctx)
	padmin, radmin := redisAdmin(t, rs.primary), redisAdmin(t, rs.replica)

	holder, err := lock.Open(ctx, rs.url, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := lock.Open(ctx, rs.url, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// Cut the replica off: frozen, and its link dropped by the primary.
	if err := rs.replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = rs.replica.Resume()
		}
	}()
	if err := padmin.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	redisWait(t, ctx, "the primary to have no replica", func() bool {
		info, err := padmin.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})

	a, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tokenA := a.Token()
	fence := &redisFence{}
	if !fence.write(tokenA) {
		t.Fatal("the fenced resource refused the first holder's write")
	}
	if n, err := padmin.Exists(ctx, redisLockKey(key)).Result(); err != nil || n != 1 {
		t.Fatalf("lock key on the primary: exists=%d, %v; want it there", n, err)
	}
	lostA := redisLostAt(ctx, a.Lost())

	// The other client is waiting (queued on the primary) when the primary
	// dies, as a contending replica of a service would be.
	bc := make(chan redisGrant, 1)
	go func() {
		l, err := other.Acquire(ctx, key)
		g := redisGrant{l: l, err: err, at: time.Now()}
		select {
		case <-a.Lost():
			g.aLost = true
		default:
		}
		bc <- g
	}()
	redisWait(t, ctx, "the other client to queue for the lock", func() bool {
		n, err := padmin.LLen(ctx, redisLockKey(key)+":queue").Result()
		return err == nil && n == 1
	})

	killed := time.Now()
	if err := rs.primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := rs.replica.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// The replica, the primary to be, never had the key, nor the fence
	// record, and has no primary to get them from any more.
	for _, k := range []string{redisLockKey(key), redisLockKey(key) + ":fence"} {
		if n, err := radmin.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("%s on the replica: exists=%d, %v; want it absent", k, n, err)
		}
	}

	// The operator's failover: retried while Sentinel has not yet heard from
	// the resumed replica (NOGOODSLAVE).
	redisWait(t, ctx, "SENTINEL FAILOVER to be accepted", func() bool {
		err := rs.sentinel.Failover(ctx, "mymaster").Err()
		if err != nil && !strings.Contains(err.Error(), "NOGOODSLAVE") {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		return err == nil
	})
	redisWait(t, ctx, "Sentinel to name the replica as primary", func() bool {
		addr, err := rs.sentinel.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == rs.replica.Addr()
	})
	switched := time.Now()
	redisFigure(t, "failover-after-primary-kill", backend, switched.Sub(killed))

	// The waiting client acquires through the same Sentinel URL (its
	// Acquire retries while the failover client finds the new primary).
	g := <-bc
	if g.err != nil {
		t.Fatalf("Acquire through Sentinel across the failover: %v", g.err)
	}
	b := g.l
	defer func() { _ = b.Release(ctx) }()
	tokenB := b.Token()
	redisFigure(t, "other-granted-after-primary-kill", backend, g.at.Sub(killed))

	select {
	case <-a.Lost():
	case <-time.After(redisStep):
		t.Fatalf("the old holder's Lost still open %v after the failover", redisStep)
	}
	at := lostA()
	redisFigure(t, "lost-after-primary-kill", backend, at.Sub(killed))
	// Signed: negative when the other client held the lock before the old
	// holder knew it had lost it; that is the window fencing covers.
	redisFigure(t, "holder-lost-before-other-grant", backend, g.at.Sub(at))
	t.Logf("the old holder's Lost had closed when the other's Acquire returned: %v", g.aLost)
	// The validity deadline bounds Lost whatever the driver learns: its last
	// confirmed refresh began before the kill, so the deadline is less than a
	// TTL after it. The second is slack for the timer on a loaded machine.
	if d := at.Sub(killed); d > ttl+time.Second {
		t.Errorf("Lost closed %v after the primary was killed, want within the TTL (%v)", d, ttl)
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release by the old holder after the failover = %v, want ErrLost", err)
	} else {
		t.Logf("old holder's Release: %v", err)
	}

	t.Logf("tokens: old holder %d, new holder %d", tokenA, tokenB)
	if tokenB <= tokenA {
		t.Fatalf("new holder's token %d is not larger than the old holder's %d: a fenced resource cannot tell them apart", tokenB, tokenA)
	}
	if !fence.write(tokenB) {
		t.Fatal("the fenced resource refused the new holder's write")
	}
	if fence.write(tokenA) {
		t.Fatal("the fenced resource accepted the old holder's write after the new holder's")
	}
}
