package telemetrytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// loss is one way the scripted scenario loses a lock on a backend, and what it
// adds to the telemetry besides the loss itself (a lost hold, a loss of its
// cause, a Warn "lock lost" line with that cause).
type loss struct {
	cause string // distlock.loss.cause, and the sentinel Err must match
	err   error
	// lose acquires key on r.lk, makes the lock be lost for real, and returns
	// it once Lost has closed.
	lose func(t *testing.T, r *rig, key string) *lock.Lock

	refreshes       int64            // refresh attempts it makes
	refreshFailures map[string]int64 // failed ones, by error.type
	backendErrors   map[string]int64 // by error.type
	// refreshEvents bounds the refresh events on its hold span: a refresh whose
	// answer races the validity deadline lands after the span ended, and is
	// counted but not an event.
	refreshEvents [2]int
	logs          []string // further log lines, "LEVEL message"
}

// scriptedScenario runs the scenario on r, losing one lock by each of losses in
// turn, and checks every metric, span and log line against what happened:
//
//   - acquire (under the caller's span), TryAcquire refused, Acquire until a
//     deadline, Acquire with a cancelled context;
//   - contend: a waiter blocked until the holder's release, after a manual
//     refresh;
//   - each loss;
//   - campaign and resign.
func scriptedScenario(t *testing.T, r *rig, losses []loss) {
	ctx := context.Background()
	backend := r.backend

	// The caller's span, under which the first lock lives.
	jobCtx, job := r.tp.Tracer("telemetrytest").Start(ctx, "job")
	l1, err := r.lk.Acquire(jobCtx, "a")
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
	if err := l1.Release(jobCtx); err != nil {
		t.Fatal(err)
	}
	job.End()
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for i, ls := range losses {
		l := ls.lose(t, r, fmt.Sprintf("lost-%d", i))
		if !errors.Is(l.Err(), lock.ErrLost) || !errors.Is(l.Err(), ls.err) {
			t.Fatalf("Err of a lock lost by %s: %v, want ErrLost and %v", ls.cause, l.Err(), ls.err)
		}
	}
	ld, err := r.lk.Campaign(ctx, "e", "me")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	// What the losses add up to.
	wantLosses := map[string]int64{}
	wantRefreshes := int64(1) // l1's manual refresh
	wantFailures := map[string]int64{}
	wantBackendErrors := map[string]int64{}
	for _, ls := range losses {
		wantLosses[ls.cause]++
		wantRefreshes += ls.refreshes
		for c, n := range ls.refreshFailures {
			wantFailures[c] += n
		}
		for c, n := range ls.backendErrors {
			wantBackendErrors[c] += n
		}
	}
	nLost := uint64(len(losses))
	granted := 3 + nLost // l1, the waiter, each lost lock, the campaign

	m := r.collect()
	for oc, want := range map[string]uint64{"acquired": granted, "locked": 1, "timeout": 1, "cancelled": 1, "error": 0} {
		if n, _ := total(find(m["distlock.acquire.duration"], backend, outcome(oc))); n != want {
			t.Errorf("acquire.duration{outcome=%s} count %d, want %d", oc, n, want)
		}
	}
	// wait.duration: one per grant; the waiter's is at least from when it was
	// seen blocked to the release that let it in.
	waits := find(m["distlock.acquire.wait.duration"], backend)
	if n, _ := total(waits); n != granted || len(waits) != 1 {
		t.Errorf("acquire.wait.duration: %d points, count %d, want one point of %d", len(waits), n, granted)
	} else if min := releasing.Sub(seenBlocked).Seconds(); waits[0].max < min {
		t.Errorf("acquire.wait.duration: max %vs, want at least %vs (the waiter's wait)", waits[0].max, min)
	}
	hold := m["distlock.lock.hold.duration"]
	for end, want := range map[string]uint64{"released": 3, "lost": nLost, "closed": 0} {
		if n, _ := total(find(hold, backend, attribute.String("distlock.lock.end", end))); n != want {
			t.Errorf("lock.hold.duration{end=%s} count %d, want %d", end, n, want)
		}
	}
	if _, v := total(find(m["distlock.locks.held"], backend)); v != 0 {
		t.Errorf("locks.held = %d after every lock ended, want 0", v)
	}
	checkByClass(t, "lock.losses", m["distlock.lock.losses"], backend, "distlock.loss.cause", wantLosses)
	if _, v := total(find(m["distlock.lock.refreshes"], backend)); v != wantRefreshes {
		t.Errorf("lock.refreshes = %d, want %d", v, wantRefreshes)
	}
	checkByClass(t, "lock.refresh.failures", m["distlock.lock.refresh.failures"], backend, "error.type", wantFailures)
	checkByClass(t, "backend.errors", m["distlock.backend.errors"], backend, "error.type", wantBackendErrors)
	// acquire.wakeups: the waiter, woken once by l1's release (the backend's
	// notification); no acquisition waited for a timer.
	checkByClass(t, "acquire.wakeups", m["distlock.acquire.wakeups"], backend, "distlock.wakeup.source", map[string]int64{"notification": 1})
	for name, ps := range m {
		for _, p := range ps {
			if _, has := p.attrs.Value("distlock.key"); has {
				t.Errorf("%s carries distlock.key without WithKeyAttribute(true)", name)
			}
		}
	}

	checkScenarioSpans(t, r, losses, job)
	checkScenarioLogs(t, r, losses)
}

// checkByClass checks that the counter's points, by the attribute key, add up
// to want exactly (no class missing, none extra).
func checkByClass(t *testing.T, name string, ps []point, backend attribute.KeyValue, key attribute.Key, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for _, p := range find(ps, backend) {
		v, _ := p.attrs.Value(key)
		got[v.AsString()] += p.value
	}
	if len(find(ps, backend)) != len(ps) {
		t.Errorf("%s: points %v, some without %v", name, ps, backend)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s by %s = %v, want %v", name, key, got, want)
	}
}

func checkScenarioSpans(t *testing.T, r *rig, losses []loss, job trace.Span) {
	t.Helper()
	nLost := len(losses)
	byName := map[string][]sdktrace.ReadOnlySpan{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range r.spans.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
		byID[s.SpanContext().SpanID()] = s
	}
	for name, want := range map[string]int{"distlock.acquire": 4 + nLost, "distlock.try-acquire": 1, "distlock.campaign": 1,
		"distlock.release": 3, "distlock.hold": 3 + nLost} {
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
	for _, s := range byName["distlock.release"] {
		if s.Status().Code == codes.Error {
			t.Errorf("release span in error: %v", s.Status())
		}
	}

	// Each hold span links to the acquisition that granted it, and is that
	// acquisition's sibling under the caller's span (the job's, for the first
	// lock), or its child when the caller had no span.
	jobID := job.SpanContext().SpanID()
	underJob := 0
	refreshEvents := map[string]int{}
	ends := map[string]int{}
	for _, s := range byName["distlock.hold"] {
		if len(s.Links()) != 1 {
			t.Errorf("hold span with %d links, want 1 (to its acquisition)", len(s.Links()))
			continue
		}
		acq, ok := byID[s.Links()[0].SpanContext.SpanID()]
		if !ok || (acq.Name() != "distlock.acquire" && acq.Name() != "distlock.campaign") || attr(acq, "distlock.outcome") != "acquired" {
			t.Errorf("hold span links to %v, want a granted acquisition's span", s.Links()[0].SpanContext)
			continue
		}
		if s.SpanContext().TraceID() != acq.SpanContext().TraceID() {
			t.Errorf("hold span in trace %v, its acquisition in %v", s.SpanContext().TraceID(), acq.SpanContext().TraceID())
		}
		switch {
		case acq.Parent().IsValid():
			if s.Parent().SpanID() != acq.Parent().SpanID() {
				t.Errorf("hold span's parent %v, want its acquisition's parent %v (siblings)", s.Parent().SpanID(), acq.Parent().SpanID())
			}
			if acq.Parent().SpanID() == jobID {
				underJob++
			}
		case s.Parent().SpanID() != acq.SpanContext().SpanID():
			t.Errorf("hold span's parent %v, want its acquisition %v (the caller had no span)", s.Parent().SpanID(), acq.SpanContext().SpanID())
		}
		if attr(s, "distlock.lock.end") == "lost" {
			if s.Status().Code != codes.Error {
				t.Errorf("hold span of a lost lock has status %v", s.Status())
			}
			cause := attr(s, "distlock.loss.cause")
			ends[cause]++
			refreshEvents[cause] += len(eventsNamed(s, "refresh"))
		} else {
			ends[attr(s, "distlock.lock.end")]++
			refreshEvents[""] += len(eventsNamed(s, "refresh"))
		}
	}
	if underJob != 1 {
		t.Errorf("%d hold spans under the job's span, want 1 (the first lock's)", underJob)
	}
	wantEnds := map[string]int{"released": 3}
	for _, ls := range losses {
		wantEnds[ls.cause]++
		if n := refreshEvents[ls.cause]; n < ls.refreshEvents[0] || n > ls.refreshEvents[1] {
			t.Errorf("%d refresh events on the hold span lost by %s, want %d to %d", n, ls.cause, ls.refreshEvents[0], ls.refreshEvents[1])
		}
	}
	if fmt.Sprint(ends) != fmt.Sprint(wantEnds) {
		t.Errorf("hold spans by end or loss cause %v, want %v", ends, wantEnds)
	}
	if refreshEvents[""] != 1 {
		t.Errorf("%d refresh events on the released locks' hold spans, want 1 (l1's manual refresh)", refreshEvents[""])
	}
}

// checkScenarioLogs checks the log lines: each loss at Warn with its cause,
// the lines the losses add, and nothing else at Info or above (no line per
// successful operation).
func checkScenarioLogs(t *testing.T, r *rig, losses []loss) {
	t.Helper()
	var want, got []string
	for _, ls := range losses {
		want = append(want, "WARN distlock: lock lost cause="+ls.cause)
		want = append(want, ls.logs...)
	}
	for _, ln := range strings.Split(strings.TrimSpace(r.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(ln), &rec); err != nil {
			t.Fatalf("log line %q: %v", ln, err)
		}
		s := fmt.Sprintf("%v %v", rec["level"], rec["msg"])
		if c, ok := rec["cause"]; ok {
			s += fmt.Sprintf(" cause=%v", c)
		}
		if rec["backend"] != r.backend.Value.AsString() {
			t.Errorf("log line %q: backend %v, want %s", ln, rec["backend"], r.backend.Value.AsString())
		}
		got = append(got, s)
	}
	// Compared as sets of lines: a refresh that fails as the validity deadline
	// passes logs the backend unreachable before or after the loss.
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The scripted scenario on mem: lost by expiry (no refresh before the
// validity deadline) and by an operator's ForceRelease.
func TestScenarioEmitsEachMetricSpanAndLogWithTheRightValues(t *testing.T) {
	r := newRig(t)
	scriptedScenario(t, r, []loss{
		{cause: "expired", err: lock.ErrExpired, lose: func(t *testing.T, r *rig, key string) *lock.Lock {
			l, err := r.lk.Acquire(context.Background(), key, lock.WithTTL(50*time.Millisecond), lock.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			lost(t, l)
			return l
		}},
		{cause: "force_released", err: lock.ErrForceReleased, lose: loseByForceRelease(false)},
	})
}

// loseByForceRelease loses a lock by the operator's ForceRelease; with
// refresh, the holder learns it at its next refresh, made by hand here.
func loseByForceRelease(refresh bool) func(t *testing.T, r *rig, key string) *lock.Lock {
	return func(t *testing.T, r *rig, key string) *lock.Lock {
		ctx := context.Background()
		l, err := r.lk.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.op.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		if refresh {
			if err := l.Refresh(ctx); !errors.Is(err, lock.ErrForceReleased) {
				t.Fatalf("Refresh of a force-released lock: %v, want ErrForceReleased", err)
			}
		}
		lost(t, l)
		return l
	}
}
