package redlockdriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// newLocker opens a Locker on the servers' redlock URL, closed with the test.
func newLocker(t *testing.T, ctx context.Context, servers []*testserver.Server, extra ...string) *lock.Locker {
	t.Helper()
	lk, err := lock.Open(ctx, redlockURL(servers, extra...), lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// With two of five servers down, a majority is still there: locks are taken,
// exclude others, wait and hand over as usual; and Open works too.
func TestLockingWorksWithTwoOfFiveServersStopped(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 5)
	a := newLocker(t, ctx, servers)
	for _, s := range servers[3:] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	b := newLocker(t, ctx, servers) // opened while two are down

	l, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("Acquire with 3 of 5 servers up: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a held lock with 3 of 5 servers up = %v, want ErrLocked", err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := b.Acquire(ctx, "k")
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with 3 of 5 servers up: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with 3 of 5 servers up: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter with 3 of 5 servers up: %v", err)
	}
}

// With three of five servers down no majority can be had: Acquire makes one
// round and reports it (package lock owns the retries) with an error that
// matches ErrNoQuorum and driver.ErrUnavailable and names each stopped server
// and why; what it took on the survivors is given back. The survivors'
// command logs show a single acquire attempt (the driver used to make three
// rounds of its own, which package lock's retries multiplied).
func TestAcquireWithThreeOfFiveServersStoppedMakesOneAttemptAndLeavesNothing(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 5)
	admin := admins(t, servers)
	d, err := openURL(ctx, redlockURL(servers))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Connect, and load the scripts, while every server is up.
	warm := &driver.Request{Key: "warm", Owner: "owner-0", TTL: 2 * time.Second, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, warm); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, warm); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[2:] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// Log every command the survivors run, with its arguments.
	for _, a := range admin[:2] {
		if err := a.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := a.ConfigSet(ctx, "slowlog-max-len", "1000").Err(); err != nil {
			t.Fatal(err)
		}
		if err := a.SlowLogReset(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	req := &driver.Request{Key: "k", Owner: "owner-1", TTL: 2 * time.Second, Lost: driver.LostFunc(func(error) {})}
	_, err = d.Acquire(ctx, req)
	if err == nil {
		t.Fatal("Acquire with 2 of 5 servers up succeeded")
	}
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, driver.ErrUnavailable) ||
		!strings.Contains(err.Error(), "server 5 (") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Acquire with 2 of 5 servers up = %v, want an error matching ErrNoQuorum and ErrUnavailable that names each stopped server and why", err)
	}
	t.Logf("Acquire with 2 of 5 servers up: %v", err)
	for i, a := range admin[:2] {
		if n := acquireAttempts(ctx, t, a); n != 1 {
			t.Errorf("server %d ran the acquire script %d times for one Acquire, want 1", i+1, n)
		}
	}
	if _, err := d.TryAcquire(ctx, req); !errors.Is(err, ErrNoQuorum) || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("TryAcquire with 2 of 5 servers up = %v, want an error matching ErrNoQuorum and ErrUnavailable", err)
	}
	if keys := residue(ctx, t, admin[:2], DefaultPrefix); len(keys) > 0 {
		t.Fatalf("keys left on the surviving servers: %v", keys)
	}
}

// Through package lock, no quorum is transient (servers come back): Acquire
// retries it until its context ends, then reports the last round's failure
// with it.
func TestAcquireWithThreeOfFiveServersStoppedRetriesUntilItsContextEnds(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 5)
	lk := newLocker(t, ctx, servers)
	for _, s := range servers[2:] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := lk.Acquire(actx, "k")
	if err == nil {
		t.Fatal("Acquire with 2 of 5 servers up succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Acquire with 2 of 5 servers up = %v, want it to retry until its context ended and report ErrUnavailable", err)
	}
	if !errors.Is(err, ErrNoQuorum) || !strings.Contains(err.Error(), "server 5 (") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Acquire with 2 of 5 servers up = %v, want an error matching ErrNoQuorum that names each stopped server and why", err)
	}
}

// acquireAttempts counts the acquire scripts in a server's slow log (which
// logs every command when slowlog-log-slower-than is 0).
func acquireAttempts(ctx context.Context, t *testing.T, admin *redis.Client) int {
	t.Helper()
	entries, err := admin.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if len(e.Args) < 2 {
			continue
		}
		switch strings.ToUpper(e.Args[0]) {
		case "EVALSHA":
			if e.Args[1] == acquireScript.Hash() {
				n++
			}
		case "EVAL": // the slow log keeps the first 128 bytes of an argument
			if strings.HasPrefix(e.Args[1], acquireLua[:64]) {
				n++
			}
		}
	}
	return n
}

// A server that stops answering (SIGSTOP) costs a round at most the
// per-server timeout: with a context of a few per-server timeouts, locks are
// still taken, refreshed and released.
func TestPausedServerDoesNotStallAcquisition(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	const timeout = 50 * time.Millisecond
	lk := newLocker(t, ctx, servers, "server_timeout=50ms")
	other := newLocker(t, ctx, servers, "server_timeout=50ms")
	if l, err := lk.Acquire(ctx, "warm"); err != nil { // connections made
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = servers[0].Resume() }()
	for i := 0; i < 10; i++ {
		// Each call gets four per-server timeouts: the paused server's
		// timeout, and plenty for the two that answer.
		step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 4*timeout) }
		c, cancel := step()
		l, err := lk.Acquire(c, "k")
		cancel()
		if err != nil {
			t.Fatalf("round %d: Acquire with one of three servers paused: %v", i, err)
		}
		c, cancel = step()
		_, err = other.TryAcquire(c, "k")
		cancel()
		if !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("round %d: TryAcquire of the held lock = %v, want ErrLocked", i, err)
		}
		c, cancel = step()
		err = l.Refresh(c)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Refresh with one of three servers paused: %v", i, err)
		}
		c, cancel = step()
		err = l.Release(c)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Release with one of three servers paused: %v", i, err)
		}
	}

	// A waiter, whose subscription to the paused server cannot be confirmed,
	// is still woken by the others, and its Locker closes promptly.
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := lock.Open(ctx, redlockURL(servers, "server_timeout=50ms"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := waiter.Acquire(ctx, "k")
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter with one of three servers paused: %v", err)
	}
	if _, err := lk.Acquire(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := waiter.Acquire(ctx, "k2")
		got <- err
	}()
	admin := admins(t, servers)
	for admin[1].Exists(ctx, DefaultPrefix+":{k2}:waiters").Val() == 0 { // until the waiter waits
		select {
		case <-ctx.Done():
			t.Fatal("the waiter never registered")
		case <-time.After(time.Millisecond):
		}
	}
	start := time.Now()
	if err := waiter.Close(); err != nil {
		t.Fatalf("Close with one of three servers paused: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Close with one of three servers paused took %v", took)
	}
	if err := <-got; !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Acquire interrupted by Close = %v, want ErrClosed", err)
	}
}

// A split vote (no owner on a majority) is given back: after TryAcquire and a
// waiting Acquire that meet one, no server keeps the contender's key or its
// waiting registration, and the foreign owners' keys are untouched.
func TestSplitVoteLeavesNoStrayKey(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	lk := newLocker(t, ctx, servers)
	// Two foreign owners, one server each; the third server is free. Every
	// round takes the third and sees no majority anywhere.
	key := DefaultPrefix + ":{k}"
	for i, owner := range []string{"foreign-1", "foreign-2"} {
		if err := admin[i].Set(ctx, key, owner, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		keys := residue(ctx, t, admin, DefaultPrefix)
		want := []string{"server 1: " + key, "server 2: " + key}
		if len(keys) != 2 || keys[0] != want[0] || keys[1] != want[1] {
			t.Fatalf("%s: keys under the prefix %v, want only the foreign locks %v", when, keys, want)
		}
		for i, owner := range []string{"foreign-1", "foreign-2"} {
			if v := admin[i].Get(ctx, key).Val(); v != owner {
				t.Fatalf("%s: server %d holds %q, want the foreign owner %q", when, i+1, v, owner)
			}
		}
	}

	if _, err := lk.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire against a split = %v, want ErrLocked", err)
	}
	check("after TryAcquire")

	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := lk.Acquire(actx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire against a split = %v, want context.DeadlineExceeded", err)
	}
	check("after a waiting Acquire gave up")
}

// A Release that reached too few servers in time reports that the outcome is
// unknown, and keeps the lock; its retry, after the servers came back having
// run the first Release's deletes late, finds the lock gone there and counts
// that as released: it must not report the lock lost.
func TestReleaseRetriedAfterLateDeletesIsNotALoss(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	lk, err := lock.Open(ctx, redlockURL(servers), lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[1:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	err = l.Release(ctx)
	for _, s := range servers[1:] {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(err, ErrNoQuorum) || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release with 2 of 3 servers paused = %v, want ErrNoQuorum (outcome unknown)", err)
	}
	// Whether a paused server runs a request that timed out meanwhile depends
	// on when it reads its socket; play its late delete by hand.
	key := DefaultPrefix + ":{k}"
	for _, a := range admin[1:] {
		if err := a.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release retried after the first one's deletes landed late = %v, want nil", err)
	}
}
