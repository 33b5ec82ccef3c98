package lock_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/memdriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkHeldLocks holds 10,000 locks with automatic refresh on and reports the
// portable layer's memory per held lock and the goroutines it needs.
func BenchmarkHeldLocks(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		lk := lock.New(memdriver.New(fmt.Sprintf("bench-held-%d", i)), lock.WithTTL(time.Minute))
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		held := make([]*lock.Lock, 0, n)
		for k := 0; k < n; k++ {
			l, err := lk.Acquire(ctx, fmt.Sprintf("held/%d", k))
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, l)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/held-lock")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0), "goroutines-added")
		for _, l := range held {
			_ = l.Release(ctx)
		}
		lk.Close()
	}
}

// BenchmarkAcquireRelease is an uncontended acquire and release through the
// portable layer on the in-process driver: the layer's own overhead.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	lk := lock.New(memdriver.New("bench-uncontended"))
	defer lk.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l, err := lk.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff measures the time from a release to a blocked waiter on another
// Locker holding the lock (wake-up latency), reported as p50 and p99.
func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	name := fmt.Sprintf("bench-handoff-%d", b.N)
	holder, waiter := lock.New(memdriver.New(name)), lock.New(memdriver.New(name))
	defer holder.Close()
	defer waiter.Close()
	gaps := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		l, err := holder.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time)
		go func() {
			w, err := waiter.Acquire(ctx, "k")
			if err != nil {
				panic(err)
			}
			got <- time.Now()
			_ = w.Release(ctx)
		}()
		time.Sleep(200 * time.Microsecond) // let the waiter block
		released := time.Now()
		_ = l.Release(ctx)
		gaps = append(gaps, (<-got).Sub(released))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "µs-p50-wake")
	b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds()), "µs-p99-wake")
}

// BenchmarkAcquireReleaseNoopTelemetry is BenchmarkAcquireRelease with the
// OpenTelemetry no-op providers and a logger given explicitly: instrumentation
// that records nothing must cost what none does.
func BenchmarkAcquireReleaseNoopTelemetry(b *testing.B) {
	ctx := context.Background()
	lk := lock.New(memdriver.New("bench-uncontended-noop"),
		lock.WithMeterProvider(metricnoop.NewMeterProvider()), lock.WithTracerProvider(tracenoop.NewTracerProvider()),
		lock.WithLogger(slog.New(slog.DiscardHandler)))
	defer lk.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l, err := lk.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReleaseParallel is acquire and release on distinct keys from
// many goroutines of one Locker (8 per CPU): what calls on unrelated keys share
// in the portable layer. The caller's context can end (a cancelable one) or not
// (Background), which the layer registers differently for Close.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"cancelable", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lk := lock.New(memdriver.New("bench-parallel-" + tc.name))
			defer lk.Close()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				ctx, cancel := tc.ctx()
				defer cancel()
				key := fmt.Sprintf("distinct/%d", next.Add(1))
				for pb.Next() {
					l, err := lk.Acquire(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkDo measures Do's round trip on mem: acquire, run an empty function,
// release.
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	lk, err := lock.Open(ctx, "mem://bench-do")
	if err != nil {
		b.Fatal(err)
	}
	defer lk.Close()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := lk.Do(ctx, "k", fn); err != nil {
			b.Fatal(err)
		}
	}
}
