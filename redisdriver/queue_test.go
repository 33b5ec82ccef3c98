package redisdriver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// Goroutines that release and at once ask again do not keep the lock to
// themselves: the release hands it to the first waiter, and the releaser joins
// the end of the queue. Polling locks let the releaser win 80-100% of the time.
func TestReleasersDoNotStarveWaiters(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const lockers, goroutines, total = 2, 8, 400
	prefix := "fair-" + randomHex(4)
	var lks [lockers]*lock.Locker
	for i := range lks {
		d, err := New(adminClient(t, url), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		lks[i] = lock.New(d)
		defer lks[i].Close()
	}
	var (
		mu       sync.Mutex
		taken    int
		counts   [goroutines]int
		last     = -1
		handoffs int
		wg       sync.WaitGroup
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				l, err := lks[g%lockers].Acquire(ctx, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				done := taken == total
				if !done {
					taken++
					counts[g]++
					if last != g {
						handoffs++
					}
					last = g
				}
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
				if done {
					return
				}
			}
		}(g)
	}
	wg.Wait()
	t.Logf("acquisitions per goroutine %v, %d of %d handed to another goroutine", counts, handoffs, total)
	for g, n := range counts {
		if n < total/goroutines/2 {
			t.Errorf("goroutine %d got %d of %d acquisitions, less than half its share %d", g, n, total, total/goroutines)
		}
	}
}

// A waiter whose process died keeps its place until its lease ends, and a lock
// handed to it meanwhile lives for its TTL: the waiters behind it are delayed
// by at most those two, and then served.
func TestDeadWaiterDelaysOthersByItsLeaseAndTTLAtMost(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	lk, d := subscribedLocker(t, ctx, url, lock.WithTTL(time.Second))
	waiter, _ := subscribedLocker(t, ctx, url, lock.WithTTL(time.Second))

	holder, err := lk.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	// A dead waiter queues first: an entry as a waiter's Acquire writes it,
	// whose process will never renew it nor read its inbox.
	k := d.keys("job")
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const deadLease, deadTTL = 700 * time.Millisecond, 500 * time.Millisecond
	entry := fmt.Sprintf("%d %d %s", now.Add(deadLease).UnixMilli(), deadTTL.Milliseconds(), "distlock:inbox:nobody")
	if err := admin.HSet(ctx, k.Waiters, "dead-owner", entry).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.RPush(ctx, k.Queue, "dead-owner").Err(); err != nil {
		t.Fatal(err)
	}

	got := make(chan time.Time, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "job")
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Release(ctx)
	}()
	waitQueueLen(t, ctx, admin, k.Queue, 2) // the live waiter queued behind the dead one
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	waited := at.Sub(released)
	t.Logf("the live waiter got the lock %v after the release", waited)
	if bound := deadLease + deadTTL + 500*time.Millisecond; waited > bound {
		t.Errorf("the live waiter waited %v behind a dead one, want at most %v", waited, bound)
	}
	if waited < deadTTL/2 {
		t.Errorf("the live waiter got the lock %v after the release: the dead waiter's turn was skipped", waited)
	}
}

// A waiter that gives up leaves the queue at once, so the lock goes straight to
// the next waiter.
func TestCancelledWaiterLeavesTheQueue(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, d := subscribedLocker(t, ctx, url, lock.WithTTL(10*time.Second))
	b, _ := subscribedLocker(t, ctx, url, lock.WithTTL(10*time.Second))
	c, _ := subscribedLocker(t, ctx, url, lock.WithTTL(10*time.Second))
	admin := adminClient(t, url)

	held, err := a.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() { _, err := b.Acquire(bctx, "q"); bdone <- err }()
	waitQueueLen(t, ctx, admin, d.keys("q").Queue, 1)
	cdone := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "q")
		if err == nil {
			err = l.Release(ctx)
		}
		cdone <- err
	}()
	waitQueueLen(t, ctx, admin, d.keys("q").Queue, 2)
	bcancel()
	if err := <-bdone; err == nil {
		t.Fatal("cancelled Acquire succeeded")
	}
	waitQueueLen(t, ctx, admin, d.keys("q").Queue, 1)
	start := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cdone; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the second waiter got the lock %v after the release, want it at once", took)
	}
	if n, _ := admin.Exists(ctx, d.keys("q").Queue, d.keys("q").Waiters).Result(); n != 0 {
		t.Errorf("%d queue keys left behind", n)
	}
}

// waitQueueLen waits until the queue at key has n entries.
func waitQueueLen(t *testing.T, ctx context.Context, admin redis.Cmdable, key string, n int64) {
	t.Helper()
	for {
		got, err := admin.LLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("queue length %d, want %d", got, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// When a holder vanishes without releasing, its TTL runs out while several
// waiters sleep until then: they are still served in the order they queued,
// not in the order they happen to wake.
func TestWaitersKeepTheirOrderWhenTheHolderExpires(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, url)
	_, d := subscribedLocker(t, ctx, url)
	// The holder vanishes: a process that took the lock and died. (A Locker
	// whose deadline passes releases the lock itself, which hands it over.)
	if err := admin.Set(ctx, d.keys("expiring").Lock, "vanished-owner", 500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	const waiters = 4
	order := make(chan int, waiters)
	for i := 0; i < waiters; i++ {
		lk, _ := subscribedLocker(t, ctx, url, lock.WithTTL(5*time.Second))
		go func(i int) {
			l, err := lk.Acquire(ctx, "expiring")
			if err != nil {
				t.Error(err)
				order <- -1
				return
			}
			order <- i
			_ = l.Release(ctx)
		}(i)
		waitQueueLen(t, ctx, admin, d.keys("expiring").Queue, int64(i+1))
	}
	for want := 0; want < waiters; want++ {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("waiter %d was served in place %d", got, want)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("waiter %d not served within 3s of the previous one", want)
		}
	}
	if n, _ := admin.Exists(ctx, d.keys("expiring").Queue, d.keys("expiring").Waiters).Result(); n != 0 {
		t.Errorf("%d queue keys left behind", n)
	}
}
