package etcddriver_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// metric reads one of etcd's own counters from its /metrics endpoint.
func metric(t testing.TB, s *testserver.Server, name string) float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("etcd reports no metric %s", name)
	return 0
}

// Each waiter watches only the key just before its own, so a release wakes one
// waiter: etcd sends one event per handoff, not one per waiter (no herd).
func TestReleaseWakesOneWaiter(t *testing.T) {
	s := testserver.StartEtcd(t) // a private server: nobody else's watch events
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const waiters = 8
	holder, _ := newLocker(t, s.URL(), lock.WithTTL(5*time.Second))
	first := mustAcquire(t, holder, "k")
	got := make(chan *lock.Lock, waiters)
	for i := 0; i < waiters; i++ {
		lk, _ := newLocker(t, s.URL(), lock.WithTTL(5*time.Second))
		go func() {
			l, err := lk.Acquire(ctx, "k")
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, s, "etcd_debugging_mvcc_watcher_total") != waiters {
		if time.Now().After(deadline) {
			t.Fatalf("%v watchers, want one per waiter (%d)", metric(t, s, "etcd_debugging_mvcc_watcher_total"), waiters)
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := metric(t, s, "etcd_debugging_mvcc_events_total")
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < waiters; i++ {
		l := <-got
		if l == nil {
			t.FailNow()
		}
		if i == 0 {
			if n := metric(t, s, "etcd_debugging_mvcc_events_total") - before; n != 1 {
				t.Errorf("the first release sent %v watch events, want 1", n)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := metric(t, s, "etcd_debugging_mvcc_events_total") - before; n != waiters {
		t.Errorf("%d handoffs sent %v watch events, want %d (one each)", waiters, n, waiters)
	}
}
