package telemetrytest

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/memdriver"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(testserver.Main(m)) }

// rig is an instrumented Locker with in-memory readers.
type rig struct {
	t       *testing.T
	lk      *lock.Locker
	op      *lock.Locker // the operator's, uninstrumented, on the same store
	backend attribute.KeyValue
	rd      *sdkmetric.ManualReader
	tp      *sdktrace.TracerProvider
	spans   *tracetest.SpanRecorder
	logs    *bytes.Buffer
}

// newRig opens an instrumented Locker on mem, its store named after the test.
func newRig(t *testing.T, opts ...lock.Option) *rig {
	t.Helper()
	return newRigAt(t, "mem://"+t.Name(), "mem", opts...)
}

// newRigAt opens an instrumented Locker and the operator's on url, whose
// distlock.backend attribute is scheme.
func newRigAt(t *testing.T, url, scheme string, opts ...lock.Option) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{t: t, backend: attribute.String("distlock.backend", scheme), rd: sdkmetric.NewManualReader(),
		spans: tracetest.NewSpanRecorder(), logs: &bytes.Buffer{}}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.rd))
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = mp.Shutdown(ctx); _ = r.tp.Shutdown(ctx) })
	logger := slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	all := append([]lock.Option{lock.WithMeterProvider(mp), lock.WithTracerProvider(r.tp), lock.WithLogger(logger)}, opts...)
	var err error
	if r.lk, err = lock.Open(ctx, url, all...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.lk.Close() })
	if r.op, err = lock.Open(ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.op.Close() })
	return r
}

// point is one data point: its attributes and its value (a sum's value, or a
// histogram's count and sum).
type point struct {
	attrs    attribute.Set
	value    int64
	count    uint64
	sum, max float64
}

func (r *rig) collect() map[string][]point {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.rd.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/distlock/lock" {
			r.t.Errorf("instrumentation scope %q, want github.com/distlock/lock", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: p.Attributes, value: p.Value})
				}
			case metricdata.Histogram[float64]:
				if m.Unit != "s" {
					r.t.Errorf("%s: unit %q, want s", m.Name, m.Unit)
				}
				for _, p := range d.DataPoints {
					mx, _ := p.Max.Value()
					out[m.Name] = append(out[m.Name], point{attrs: p.Attributes, count: p.Count, sum: p.Sum, max: mx})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					mx, _ := p.Max.Value()
					out[m.Name] = append(out[m.Name], point{attrs: p.Attributes, count: p.Count, value: p.Sum, max: float64(mx)})
				}
			default:
				r.t.Errorf("%s: unexpected data type %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// find returns the points of name whose attributes include every kv.
func find(ps []point, kv ...attribute.KeyValue) []point {
	var out []point
	for _, p := range ps {
		ok := true
		for _, want := range kv {
			if v, has := p.attrs.Value(want.Key); !has || v != want.Value {
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

func total(ps []point) (count uint64, value int64) {
	for _, p := range ps {
		count += p.count
		value += p.value
	}
	return
}

// waitFor waits for cond with a deadline; it fails the test if cond never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func lost(t *testing.T, l *lock.Lock) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("lock not lost within 10s")
	}
}

func outcome(s string) attribute.KeyValue { return attribute.String("distlock.outcome", s) }

func source(s string) attribute.KeyValue { return attribute.String("distlock.wakeup.source", s) }

func eventsNamed(s sdktrace.ReadOnlySpan, name string) []sdktrace.Event {
	var out []sdktrace.Event
	for _, e := range s.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// The key is in metrics and spans only when asked for.
func TestKeyAttributeOnlyWithWithKeyAttribute(t *testing.T) {
	r := newRig(t, lock.WithKeyAttribute(true))
	ctx := context.Background()
	l, err := r.lk.Acquire(ctx, "invoice:42")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	key := attribute.String("distlock.key", "invoice:42")
	m := r.collect()
	for _, name := range []string{"distlock.acquire.duration", "distlock.acquire.wait.duration", "distlock.lock.hold.duration", "distlock.locks.held"} {
		if len(m[name]) == 0 || len(find(m[name], r.backend, key)) != len(m[name]) {
			t.Errorf("%s: points %v, want each with %v", name, m[name], key)
		}
	}
	for _, s := range r.spans.Ended() {
		if attr(s, "distlock.key") != "invoice:42" {
			t.Errorf("span %s without the key attribute", s.Name())
		}
	}
}

// A Locker made by New names its backend by the driver's package.
func TestNewNamesTheBackendByTheDriverPackage(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	lk := lock.New(memdriver.New(t.Name()), lock.WithMeterProvider(mp))
	defer lk.Close()
	if _, err := lk.Acquire(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, rd: rd}
	m := r.collect()
	if len(find(m["distlock.locks.held"], attribute.String("distlock.backend", "memdriver"))) != 1 {
		t.Errorf("locks.held points %v, want one with distlock.backend=memdriver", m["distlock.locks.held"])
	}
}

// The histograms' buckets resolve sub-millisecond acquisitions and hour-long
// holds: the SDK's default boundaries (0, 5, 10, ... 10000), made for
// milliseconds, would put every acquisition below 5s in one bucket, and a
// quantile over the buckets (Prometheus' histogram_quantile) would mean nothing.
func TestHistogramsBucketInSeconds(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	l, err := r.lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := r.rd.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, p := range h.DataPoints {
				seen++
				if len(p.Bounds) < 10 || p.Bounds[0] > 0.001 {
					t.Errorf("%s: bounds %v, want at least 10 starting at 1ms or below", m.Name, p.Bounds)
				}
				if m.Name != "distlock.lock.hold.duration" && p.Bounds[len(p.Bounds)-1] < 30 {
					t.Errorf("%s: bounds %v, want them to reach a caller's timeout (30s)", m.Name, p.Bounds)
				}
				if m.Name == "distlock.lock.hold.duration" && p.Bounds[len(p.Bounds)-1] < 3600 {
					t.Errorf("%s: bounds %v, want them to reach an hour", m.Name, p.Bounds)
				}
			}
		}
	}
	if seen != 3 {
		t.Errorf("%d histogram points, want 3 (acquire, wait, hold)", seen)
	}
}
