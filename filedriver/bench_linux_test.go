//go:build linux

package filedriver

import (
	"context"
	"slices"
	"testing"
	"time"

	lock "github.com/distlock/lock"
)

// BenchmarkHandoff measures how long a blocked waiter takes to hold a lock after
// its holder releases it, through the portable layer, with holder and waiter in
// separate clients. It reports the median and 99th percentile of that wake-up
// latency; ns/op is a whole cycle (acquire, block, release, wake, release).
func BenchmarkHandoff(b *testing.B) {
	dir := b.TempDir()
	d1, err := New(dir)
	if err != nil {
		b.Fatal(err)
	}
	d2, err := New(dir)
	if err != nil {
		b.Fatal(err)
	}
	blocked := blockedHook(d2)
	holder, waiter := lock.New(d1), lock.New(d2)
	defer holder.Close()
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	type result struct {
		l   *lock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	lats := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := holder.TryAcquire(ctx, "handoff")
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			l, err := waiter.Acquire(ctx, "handoff")
			got <- result{l, err, time.Now()}
		}()
		<-blocked
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			b.Fatal(r.err)
		}
		lats = append(lats, r.at.Sub(released))
		for len(blocked) > 0 { // a waiter that blocked twice must not fool the next round
			<-blocked
		}
		if err := r.l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "wake-µs-p50")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "wake-µs-p99")
}
