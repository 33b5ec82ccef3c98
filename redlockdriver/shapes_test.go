package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// shapeLocker opens a Locker over servers with a 30s TTL (the first refresh
// 10s after a grant, a waiter's own look again at the latest after 10s), so
// that what happens within a second or two is the servers' doing. Its driver
// has held a lock and is subscribed on every server: a waiter polls only
// while it is not. Each server has a second to answer (not 100ms): on a
// loaded machine under -race a round can take longer, and what these tests
// measure is who is woken, not how fast a round is.
func shapeLocker(t *testing.T, ctx context.Context, servers []*testserver.Server, opts ...lock.Option) (*Driver, *lock.Locker) {
	t.Helper()
	d, err := openURL(ctx, redlockURL(servers, "server_timeout=1s"))
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, append([]lock.Option{lock.WithTTL(30 * time.Second)}, opts...)...)
	t.Cleanup(func() { _ = lk.Close() })
	l, err := lk.TryAcquire(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, "the driver's subscriptions", d.settled)
	return d, lk
}

// writerWaitsOn reports whether a waiting writer is registered on every
// server, holding readers back there.
func writerWaitsOn(ctx context.Context, admin []*redis.Client, key string) func() bool {
	return func() bool {
		for _, a := range admin {
			if n, err := a.HLen(ctx, DefaultPrefix+":{"+key+"}:writers").Result(); err != nil || n == 0 {
				return false
			}
		}
		return true
	}
}

// registered reports whether drivers drivers are registered as waiting for
// key on every server.
func registered(ctx context.Context, admin []*redis.Client, key string, drivers int64) func() bool {
	return func() bool {
		for _, a := range admin {
			if n, err := a.HLen(ctx, DefaultPrefix+":{"+key+"}:waiters").Result(); err != nil || n < drivers {
				return false
			}
		}
		return true
	}
}

type result struct {
	l   *lock.Lock
	err error
}

func acquireBg(ctx context.Context, lk *lock.Locker, key string, opts ...lock.Option) <-chan result {
	c := make(chan result, 1)
	go func() {
		l, err := lk.Acquire(ctx, key, opts...)
		c <- result{l, err}
	}()
	return c
}

// wakeBound is how soon a waiter must acquire once what held it back is gone:
// far below the 10s after which it would look again by itself (a third of
// its registration lease), so only a wake-up by the servers meets it.
const wakeBound = 3 * time.Second

func within(t *testing.T, c <-chan result, what string) *lock.Lock {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.l
	case <-time.After(wakeBound):
		t.Fatalf("%s: not within %v", what, wakeBound)
	}
	return nil
}

// Writer preference across the quorum: once a writer waits behind a reader,
// a new reader (TryAcquire or Acquire) is held back; the writer gets the key
// when the reader ahead of it leaves, and the reader behind it when the
// writer releases, each woken by the servers. Nothing is left on the servers.
func TestWaitingWriterHoldsBackReadersThatArriveAfterIt(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	_, readers := shapeLocker(t, ctx, servers, lock.WithShared(true))
	_, writers := shapeLocker(t, ctx, servers)
	_, late := shapeLocker(t, ctx, servers, lock.WithShared(true))

	first, err := readers.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	w := acquireBg(ctx, writers, "k")
	waitUntil(ctx, t, "the writer registered as waiting on every server", writerWaitsOn(ctx, admin, "k"))
	if _, err := late.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("a reader's TryAcquire while a writer waits = %v, want ErrLocked", err)
	}
	r := acquireBg(ctx, late, "k")
	waitUntil(ctx, t, "the reader registered as waiting on every server", registered(ctx, admin, "k", 2))
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wl := within(t, w, "the writer after the reader ahead of it left")
	select {
	case x := <-r:
		t.Fatalf("the reader that arrived after the writer got the key while the writer holds it: %v", x.err)
	default:
	}
	if err := wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rl := within(t, r, "the reader after the writer released")
	if err := rl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := residue(ctx, t, admin, DefaultPrefix+":{"); len(keys) > 0 {
		t.Fatalf("left on the servers: %v", keys)
	}
}

// A writer that gives up waiting (its context ends) stops holding readers
// back at once: the reader waiting behind it is told by the servers and joins
// the reader that holds the key.
func TestWriterThatGivesUpLetsTheReadersBehindItIn(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	_, readers := shapeLocker(t, ctx, servers, lock.WithShared(true))
	_, writers := shapeLocker(t, ctx, servers)
	_, late := shapeLocker(t, ctx, servers, lock.WithShared(true))

	first, err := readers.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	wctx, giveUp := context.WithCancel(ctx)
	w := acquireBg(wctx, writers, "k")
	waitUntil(ctx, t, "the writer registered as waiting on every server", writerWaitsOn(ctx, admin, "k"))
	r := acquireBg(ctx, late, "k")
	waitUntil(ctx, t, "the reader registered as waiting on every server", registered(ctx, admin, "k", 2))
	giveUp()
	if x := <-w; !errors.Is(x.err, context.Canceled) {
		t.Fatalf("the writer's Acquire after its context ended = %v, want context.Canceled", x.err)
	}
	rl := within(t, r, "the reader behind the writer that gave up")
	for _, l := range []*lock.Lock{first, rl} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if keys := residue(ctx, t, admin, DefaultPrefix+":{"); len(keys) > 0 {
		t.Fatalf("left on the servers: %v", keys)
	}
}

// A shared hold is held while a majority holds it, as the mutex: one server
// of three coming back empty is seen by the check and changes nothing (the
// other two vote for the hold), the hold still refreshes; a second server
// coming back empty ends it.
func TestSharedHoldLivesOnAMajority(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	ctx := testContext(t)
	d, lk := shapeLocker(t, ctx, servers)
	_, other := shapeLocker(t, ctx, servers)
	l, err := lk.TryAcquire(ctx, "k", lock.WithShared(true), lock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := other.TryAcquire(ctx, "k", lock.WithShared(true))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, "the driver's subscriptions and checks", d.settled)
	backs := d.backs.Load()
	if err := restartEmpty(servers[0]); err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, "the check after the server came back", d.checkedSince(backs))
	if !isOpen(l) {
		t.Fatalf("one server of three restarted empty: the shared hold was reported lost, but two servers hold it: %v", l.Release(ctx))
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with one server of three restarted empty: %v", err)
	}
	if err := restartEmpty(servers[1]); err != nil {
		t.Fatal(err)
	}
	if _, ok := lostWithin(l, wakeBound); !ok {
		t.Fatalf("Lost() still open %v after a second server of three came back empty", wakeBound)
	}
	if err := l2.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of the other reader's hold, now on one server of three = %v, want ErrNotHeld", err)
	}
}

// Semaphores are refused: WithPermits(2) is ErrUnsupported on TryAcquire,
// Acquire and Do, and writes nothing; WithPermits(1) is the exclusive lock.
// (See "Read-write locks and semaphores" in the package documentation, and
// TestMajoritySemaphoreAdmitsMoreThanNHolders for why.)
func TestSemaphoresAreUnsupported(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	_, lk := shapeLocker(t, ctx, servers)
	two := lock.WithPermits(2)
	if _, err := lk.TryAcquire(ctx, "k", two); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("TryAcquire with WithPermits(2) = %v, want ErrUnsupported", err)
	}
	if _, err := lk.Acquire(ctx, "k", two); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Acquire with WithPermits(2) = %v, want ErrUnsupported", err)
	}
	ran := false
	if err := lk.Do(ctx, "k", func(context.Context) error { ran = true; return nil }, two); !errors.Is(err, lock.ErrUnsupported) || ran {
		t.Errorf("Do with WithPermits(2) = %v (ran: %v), want ErrUnsupported without running", err, ran)
	}
	if keys := residue(ctx, t, admin, DefaultPrefix); len(keys) > 0 {
		t.Fatalf("a refused semaphore request wrote to the servers: %v", keys)
	}
	one, err := lk.TryAcquire(ctx, "k", lock.WithPermits(1))
	if err != nil {
		t.Fatalf("TryAcquire with WithPermits(1): %v", err)
	}
	if _, err := lk.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("the exclusive lock while the only permit is held = %v, want ErrLocked", err)
	}
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// permitLua is a semaphore of n permits on one server, as a per-server
// script would keep it: a sorted set of holders, one more admitted while
// fewer than n are there.
const permitLua = `
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], 1, ARGV[1])
return 1`

// Why Redlock declares no semaphores: a semaphore of n >= 2 counted by each
// server and granted on a majority admits more than n holders. With three
// servers and n = 2, A wins {s1, s2}, B {s2, s3} and C {s1, s3}: each a
// majority, each server at its limit of two, and three holders at once. (The
// servers' counts are right; the quorum is what cannot count: two holders'
// majorities intersect, but intersection excludes only one of them.)
func TestMajoritySemaphoreAdmitsMoreThanNHolders(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	const n, key = 2, "semaphore-counterexample"
	script := redis.NewScript(permitLua)
	take := func(owner string, on ...int) int {
		t.Helper()
		won := 0
		for _, i := range on {
			v, err := script.Run(ctx, admin[i], []string{key}, owner, n).Int()
			if err != nil {
				t.Fatalf("server %d: %v", i+1, err)
			}
			won += v
		}
		return won
	}
	quorum := len(servers)/2 + 1
	holders := 0
	for _, c := range []struct {
		owner string
		on    []int
	}{{"A", []int{0, 1}}, {"B", []int{1, 2}}, {"C", []int{0, 2}}} {
		if got := take(c.owner, c.on...); got >= quorum {
			holders++
		}
	}
	for i, a := range admin {
		if c, err := a.ZCard(ctx, key).Result(); err != nil || c > n {
			t.Fatalf("server %d counts %d holders (%v), want at most %d: each server keeps its limit", i+1, c, err, n)
		}
	}
	if got := take("D", 0, 1, 2); got != 0 {
		t.Fatalf("a fourth holder won %d servers, want none: every server is at its limit", got)
	}
	if holders <= n {
		t.Fatalf("%d holders won a majority of a semaphore of %d; the counterexample expects %d", holders, n, n+1)
	}
	t.Logf("%d holders hold a majority of a %d-permit semaphore at once, every server at %d of %d: %s", holders, n, n, n,
		fmt.Sprintf("quorum %d of %d servers", quorum, len(servers)))
}
