package pgadvisory_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/internal/waketest"
	"github.com/distlock/lock/pgadvisory"
)

// churnStats is the outcome of a semaphore churn: acquisitions per goroutine
// and every wait, from asking to holding.
type churnStats struct {
	counts  []int
	waits   []time.Duration
	elapsed time.Duration
}

func (s churnStats) quantile(q float64) time.Duration {
	w := append([]time.Duration(nil), s.waits...)
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	if len(w) == 0 {
		return 0
	}
	return w[min(len(w)-1, int(q*float64(len(w))))]
}

// churn runs goroutines per Locker over lockers, each taking one of permits
// permits of key and holding it for hold, again and again, until done says
// so of the acquisitions per goroutine (or a minute has passed).
func churn(t *testing.T, lockers []*lock.Locker, perLocker, permits int, hold time.Duration, key string, done func(counts []int) bool) churnStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := len(lockers) * perLocker
	st := churnStats{counts: make([]int, n)}
	var mu sync.Mutex
	stop := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for g := 0; g < n; g++ {
		lk := lockers[g/perLocker]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				asked := time.Now()
				l, err := lk.Acquire(ctx, key, lock.WithPermits(permits))
				if err != nil {
					errs <- err
					return
				}
				waited := time.Since(asked)
				time.Sleep(hold) // the work done under the permit
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				st.counts[g]++
				st.waits = append(st.waits, waited)
				if done(st.counts) {
					stopOnce.Do(func() { close(stop) })
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return st
}

// Sixteen goroutines over four clients take one of four permits again and
// again (the bench's semaphore scenario): none is starved, each is served
// before the others together take 25 times their fair share. (Before waiters
// stayed queued on their slot through permits given back elsewhere, every
// release woke every waiter to cancel its wait and look again: 10 times
// fewer acquisitions, and goroutines under half their share.)
func TestPermitWaitersOfManyClientsAreNotStarvedWhileTheyChurn(t *testing.T) {
	dsn := testserver.Postgres(t)
	var lockers []*lock.Locker
	for i := 0; i < 4; i++ {
		_, lk := openDriver(t, dsn)
		lockers = append(lockers, lk)
	}
	const goroutines, rounds = 16, 25
	st := churn(t, lockers, goroutines/4, 4, 500*time.Microsecond, t.Name(), func(counts []int) bool {
		total, least := 0, counts[0]
		for _, c := range counts {
			total += c
			least = min(least, c)
		}
		return least > 0 || total >= goroutines*rounds
	})
	total := 0
	for _, c := range st.counts {
		total += c
	}
	t.Logf("%.0f acquisitions/s, wait p50 %v p99 %v max %v, per goroutine %v",
		float64(total)/st.elapsed.Seconds(), st.quantile(0.5), st.quantile(0.99), st.quantile(1), st.counts)
	for g, c := range st.counts {
		if c == 0 {
			t.Fatalf("goroutine %d got no permit while the others took %d", g, total)
		}
	}
}

// A permit given back while a request waits queued on its slot goes to that
// request (the server grants it with the unlock) and announces nothing: a
// waiter queued on another slot is not woken (and its client hears nothing). Its only wake-up is the
// server's grant of its own slot when that is given back. (Every permit
// given back used to be announced, and every waiter of the other slots
// cancelled its wait to look again.)
func TestPermitGivenBackToAQueuedWaiterWakesNoOtherWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	key := t.Name()
	slots := []int64{pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 0), pgadvisory.PermitID(pgadvisory.DefaultPrefix, key, 1)}
	probe := connect(t, dsn)
	type holder struct {
		d *pgadvisory.Driver
		l *lock.Lock
	}
	holderOf := map[int64]holder{}
	for i := 0; i < 2; i++ {
		d, lk := openDriver(t, dsn, lock.WithPermits(2))
		l, err := lk.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range slots {
			if holdsID(t, probe, d, id) {
				holderOf[id] = holder{d, l}
			}
		}
	}
	if len(holderOf) != 2 {
		t.Fatal("the two holders do not hold one slot each")
	}
	type grant struct {
		l   *lock.Lock
		err error
	}
	// Two waiters, each from a client of its own, queued on different
	// slots: a client's requests start at a slot that turns with each, so
	// B's Acquire, its second request, starts at the other slot than A's.
	dA, lkA := openDriver(t, dsn, lock.WithPermits(2))
	dB, lkB := openDriver(t, dsn, lock.WithPermits(2))
	pgadvisory.SetPermitRescanForTest(dB, time.Hour, time.Hour)
	if _, err := lkB.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrLocked", err)
	}
	gotA, gotB := make(chan grant, 1), make(chan grant, 1)
	go func() {
		l, err := lkA.Acquire(ctx, key)
		gotA <- grant{l, err}
	}()
	slotA := queuedOn(t, probe, dA, slots)
	var wakesB waketest.Log
	go func() {
		l, err := lkB.Acquire(wakesB.Context(ctx), key)
		gotB <- grant{l, err}
	}()
	slotB := queuedOn(t, probe, dB, slots)
	if slotA == slotB {
		t.Fatalf("both waiters queued on slot %d: the test needs them on different slots", slotA)
	}
	eventually(t, 10*time.Second, "B's client listening for permits given back", func() bool {
		return pgadvisory.PermitListeningForTest(dB)
	})

	if err := holderOf[slotA].l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-gotA
	if a.err != nil {
		t.Fatalf("A, queued on the slot given back: %v", a.err)
	}
	if !holdsID(t, probe, dA, slotA) {
		t.Fatal("A was not granted the slot it queued on")
	}
	// Announcements are heard in the order their statements committed: once
	// B's client hears one sent after that release, it has heard any the
	// release made.
	mustExec(t, probe, `SELECT pg_notify('distlock_permits', '1')`)
	eventually(t, 10*time.Second, "B's client hearing the announcement sent after the release", func() bool {
		_, last := pgadvisory.PermitAnnouncementsForTest(dB)
		return last == 1
	})
	if heard, _ := pgadvisory.PermitAnnouncementsForTest(dB); heard != 1 {
		t.Fatalf("B's client heard %d announcements, want only the one sent after the release: the permit given to A, queued on its slot, was announced", heard)
	}
	if err := holderOf[slotB].l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-gotB
	if b.err != nil {
		t.Fatalf("B: %v", b.err)
	}
	wakes := wakesB.Wakes()
	if len(wakes) != 1 || wakes[0] != driver.WakeNotified {
		t.Fatalf("B's wake-ups %v, want only the server's grant of its own slot: the permit given back to A woke it", wakes)
	}
	for _, g := range []grant{a, b} {
		if err := g.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// queuedOn waits until a session of d waits (queued, not granted) for one of
// ids, and returns that id.
func queuedOn(t *testing.T, conn *pgx.Conn, d *pgadvisory.Driver, ids []int64) int64 {
	t.Helper()
	var on int64
	eventually(t, 10*time.Second, "the permit request queued on a slot", func() bool {
		for _, id := range ids {
			var n int
			err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE a.application_name = $1 AND l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1
				AND l.classid = (($2::bigint >> 32) & 4294967295)::oid AND l.objid = ($2::bigint & 4294967295)::oid`, d.ApplicationName(), id).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				on = id
				return true
			}
		}
		return false
	})
	return on
}
