package telemetrytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/memdriver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// rig is an instrumented Locker on mem with in-memory readers.
type rig struct {
	t     *testing.T
	lk    *lock.Locker
	op    *lock.Locker // the operator's, uninstrumented, on the same store
	rd    *sdkmetric.ManualReader
	spans *tracetest.SpanRecorder
	logs  *bytes.Buffer
}

func newRig(t *testing.T, opts ...lock.Option) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{t: t, rd: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder(), logs: &bytes.Buffer{}}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.rd))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = mp.Shutdown(ctx); _ = tp.Shutdown(ctx) })
	logger := slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	all := append([]lock.Option{lock.WithMeterProvider(mp), lock.WithTracerProvider(tp), lock.WithLogger(logger)}, opts...)
	var err error
	if r.lk, err = lock.Open(ctx, "mem://"+t.Name(), all...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.lk.Close() })
	if r.op, err = lock.Open(ctx, "mem://"+t.Name()); err != nil {
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

var (
	backend = attribute.String("distlock.backend", "mem")
	outcome = func(s string) attribute.KeyValue { return attribute.String("distlock.outcome", s) }
)

// The scripted scenario: acquire, contend (locked, timeout, cancelled, a
// waiter granted on release), refresh, release, lose by expiry, lose by
// ForceRelease, campaign and resign. Every metric, span and log line is
// checked against what happened.
func TestScenarioEmitsEachMetricSpanAndLogWithTheRightValues(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()

	l1, err := r.lk.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, v := total(find(r.collect()["distlock.locks.held"], backend)); v != 1 {
		t.Fatalf("locks.held = %d while one lock is held, want 1", v)
	}
	if _, err := r.lk.TryAcquire(ctx, "a"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrLocked", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = r.lk.Acquire(tctx, "a")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until a deadline of a held key: %v, want DeadlineExceeded", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.lk.Acquire(cctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v, want Canceled", err)
	}

	// A waiter, blocked until l1's release.
	got := make(chan *lock.Lock, 1)
	go func() {
		w, err := r.lk.Acquire(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitFor(t, "the waiter to block", func() bool {
		in, err := r.op.Inspect(ctx, "a")
		return err == nil && in.Waiters == 1
	})
	seenBlocked := time.Now() // the waiter's call began before this
	if err := l1.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	releasing := time.Now() // the waiter's grant comes after this
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Lost by expiry: no refresh before the validity deadline.
	le, err := r.lk.Acquire(ctx, "b", lock.WithTTL(50*time.Millisecond), lock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	lost(t, le)
	// Lost by an operator's ForceRelease.
	lf, err := r.lk.Acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.op.ForceRelease(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	lost(t, lf)
	if !errors.Is(lf.Err(), lock.ErrForceReleased) {
		t.Fatalf("Err of a force-released lock: %v", lf.Err())
	}
	ld, err := r.lk.Campaign(ctx, "e", "me")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	m := r.collect()
	// acquire.duration by outcome: l1, the waiter, le, lf, the campaign.
	for oc, want := range map[string]uint64{"acquired": 5, "locked": 1, "timeout": 1, "cancelled": 1, "error": 0} {
		if n, _ := total(find(m["distlock.acquire.duration"], backend, outcome(oc))); n != want {
			t.Errorf("acquire.duration{outcome=%s} count %d, want %d", oc, n, want)
		}
	}
	// wait.duration: one per grant; the waiter's is at least from when it was
	// seen blocked to the release that let it in.
	waits := find(m["distlock.acquire.wait.duration"], backend)
	if n, _ := total(waits); n != 5 || len(waits) != 1 {
		t.Errorf("acquire.wait.duration: %d points, count %d, want one point of 5", len(waits), n)
	} else if min := releasing.Sub(seenBlocked).Seconds(); waits[0].max < min {
		t.Errorf("acquire.wait.duration: max %vs, want at least %vs (the waiter's wait)", waits[0].max, min)
	}
	hold := m["distlock.lock.hold.duration"]
	for end, want := range map[string]uint64{"released": 3, "lost": 2, "closed": 0} {
		if n, _ := total(find(hold, backend, attribute.String("distlock.lock.end", end))); n != want {
			t.Errorf("lock.hold.duration{end=%s} count %d, want %d", end, n, want)
		}
	}
	if _, v := total(find(m["distlock.locks.held"], backend)); v != 0 {
		t.Errorf("locks.held = %d after every lock ended, want 0", v)
	}
	losses := m["distlock.lock.losses"]
	for cause, want := range map[string]int64{"expired": 1, "force_released": 1} {
		if _, v := total(find(losses, backend, attribute.String("distlock.loss.cause", cause))); v != want {
			t.Errorf("lock.losses{cause=%s} = %d, want %d", cause, v, want)
		}
	}
	if _, v := total(losses); v != 2 {
		t.Errorf("lock.losses total %d, want 2", v)
	}
	if _, v := total(find(m["distlock.lock.refreshes"], backend)); v != 1 {
		t.Errorf("lock.refreshes = %d, want 1 (the manual refresh)", v)
	}
	if ps := m["distlock.lock.refresh.failures"]; len(ps) != 0 {
		t.Errorf("lock.refresh.failures has points %v, want none", ps)
	}
	if ps := m["distlock.backend.errors"]; len(ps) != 0 {
		t.Errorf("backend.errors has points %v, want none on mem", ps)
	}
	for name, ps := range m {
		for _, p := range ps {
			if _, has := p.attrs.Value("distlock.key"); has {
				t.Errorf("%s carries distlock.key without WithKeyAttribute(true)", name)
			}
		}
	}

	// Spans.
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range r.spans.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	for name, want := range map[string]int{"distlock.acquire": 6, "distlock.try-acquire": 1, "distlock.campaign": 1, "distlock.release": 3, "distlock.hold": 5} {
		if got := len(byName[name]); got != want {
			t.Errorf("%d %s spans, want %d", got, name, want)
		}
	}
	statuses := map[string]int{}
	for _, s := range byName["distlock.acquire"] {
		if s.Status().Code == codes.Error {
			statuses[s.Status().Description]++
		}
		if len(eventsNamed(s, "attempt")) == 0 && attr(s, "distlock.outcome") != "cancelled" {
			t.Errorf("acquire span (outcome %s) without an attempt event", attr(s, "distlock.outcome"))
		}
	}
	if statuses["timeout"] != 1 || statuses["cancelled"] != 1 || len(statuses) != 2 {
		t.Errorf("acquire spans in error: %v, want one timeout and one cancelled", statuses)
	}
	if ts := byName["distlock.try-acquire"]; len(ts) == 1 && (ts[0].Status().Code == codes.Error || attr(ts[0], "distlock.outcome") != "locked") {
		t.Errorf("try-acquire span: status %v outcome %q, want unset and locked (a refusal is no error)", ts[0].Status(), attr(ts[0], "distlock.outcome"))
	}
	causes := map[string]int{}
	refreshEvents := 0
	for _, s := range byName["distlock.hold"] {
		refreshEvents += len(eventsNamed(s, "refresh"))
		if attr(s, "distlock.lock.end") == "lost" {
			if s.Status().Code != codes.Error {
				t.Errorf("hold span of a lost lock has status %v", s.Status())
			}
			causes[attr(s, "distlock.loss.cause")]++
		}
	}
	if refreshEvents != 1 {
		t.Errorf("%d refresh events on hold spans, want 1", refreshEvents)
	}
	if causes["expired"] != 1 || causes["force_released"] != 1 {
		t.Errorf("hold spans lost by cause %v, want one expired and one force_released", causes)
	}

	// Logs: the two losses at Warn, with their cause, and nothing else at Info
	// or above (no line per successful operation).
	var lines []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(r.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(ln), &rec); err != nil {
			t.Fatalf("log line %q: %v", ln, err)
		}
		lines = append(lines, rec)
	}
	logged := map[string]int{}
	for _, rec := range lines {
		if rec["level"] != "WARN" || rec["msg"] != "distlock: lock lost" {
			t.Errorf("unexpected log line %v", rec)
			continue
		}
		logged[rec["cause"].(string)]++
	}
	if logged["expired"] != 1 || logged["force_released"] != 1 {
		t.Errorf("lost-lock log lines by cause %v, want one expired and one force_released", logged)
	}
}

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
		if len(m[name]) == 0 || len(find(m[name], backend, key)) != len(m[name]) {
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
