package lock

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Instrumentation: OpenTelemetry metrics and traces through the API only, and
// structured logs through log/slog. Everything is resolved once per Locker (in
// New): with no provider configured (the no-op providers, or global providers
// that were never set) the Locker keeps no instruments and no tracer, and the
// hot path pays a nil check, no allocation.

const instrumentationName = "github.com/distlock/lock"

// Attribute keys.
const (
	attrBackend   = attribute.Key("distlock.backend")       // the driver's URL scheme (or package name)
	attrOutcome   = attribute.Key("distlock.outcome")       // acquire: acquired, locked, timeout, cancelled, error
	attrKey       = attribute.Key("distlock.key")           // only with WithKeyAttribute(true)
	attrCause     = attribute.Key("distlock.loss.cause")    // why a lock was lost
	attrEnd       = attribute.Key("distlock.lock.end")      // how a hold ended: released, lost, closed
	attrErrorType = attribute.Key("error.type")             // unavailable, backend, ... (semantic conventions)
	attrOp        = attribute.Key("distlock.operation")     // acquire, try-acquire, campaign, do
	attrWake      = attribute.Key("distlock.wakeup.source") // notification, timer (driver.WakeSource)
	attrSetSize   = attribute.Key("distlock.set.size")      // AcquireAll: the keys of the set, de-duplicated
)

// Acquire outcomes.
const (
	outcomeAcquired  = "acquired"
	outcomeLocked    = "locked"
	outcomeTimeout   = "timeout"
	outcomeCancelled = "cancelled"
	outcomeError     = "error"
)

var outcomes = [...]string{outcomeAcquired, outcomeLocked, outcomeTimeout, outcomeCancelled, outcomeError}

// WithTracerProvider makes the Locker trace through tp instead of the global
// provider (otel.GetTracerProvider at the time of Open or New). It is a Locker
// setting: given to Open or New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.setTel(func(t *telOptions) { t.tracerProvider = tp }) }
}

// WithMeterProvider makes the Locker record metrics through mp instead of the
// global provider (otel.GetMeterProvider at the time of Open or New). It is a
// Locker setting: given to Open or New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.setTel(func(t *telOptions) { t.meterProvider = mp }) }
}

// WithKeyAttribute adds the lock's key (attribute distlock.key) to metrics and
// spans. It is off by default: keys can be unbounded in number (a metric series
// each) and can carry data that should not leave the process.
func WithKeyAttribute(on bool) Option {
	return func(o *options) { o.setTel(func(t *telOptions) { t.keyAttr = on }) }
}

// WithLogger makes the Locker log the events an operator needs on logger: a
// lock lost (Warn, with its cause), the backend server restarted or replaced
// (Warn, once per change), the backend unreachable (Warn) and recovered
// (Info). Successful operations are logged at Debug only. A driver whose
// backend client logs by itself (driver.LoggerUser) is given logger too, and
// routes its client's lines there. Without it the Locker logs nothing, and
// the drivers drop their clients' lines.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.setTel(func(t *telOptions) { t.logger = logger }) }
}

// withScheme names the backend for the telemetry's distlock.backend attribute
// (Open passes the URL's scheme).
func withScheme(s string) Option {
	return func(o *options) { o.setTel(func(t *telOptions) { t.scheme = s }) }
}

// telemetry is a Locker's instrumentation, resolved once.
type telemetry struct {
	backend string
	keyAttr bool
	logger  *slog.Logger // nil: silent
	tracer  trace.Tracer // nil: not tracing
	metrics *instruments // nil: no metrics

	unreachable atomic.Bool // the last backend call failed transiently (for the recovered log)

	// mu guards what follows. It is taken only when something is on
	// (metrics, tracing or a logger): then, not before, the hold and release
	// of locks on distinct keys meet on it.
	mu sync.Mutex

	// For the server-changed log (serverChanged): grants counts grants, each
	// held lock keeps its number (lockTel.grantSeq), and changeLogged is the
	// count when the last change was logged.
	grants, changeLogged uint64

	// Held locks' hold start, span and grant number; kept here rather than in
	// Lock so that a Lock costs no more when nothing is on. Nil when nothing is.
	locks map[*Lock]lockTel
}

type lockTel struct {
	since    time.Time
	span     trace.Span // nil when not tracing
	grantSeq uint64
}

type instruments struct {
	acquireDuration metric.Float64Histogram
	waitDuration    metric.Float64Histogram
	holdDuration    metric.Float64Histogram
	held            metric.Int64UpDownCounter
	losses          metric.Int64Counter
	refreshes       metric.Int64Counter
	refreshFailures metric.Int64Counter
	backendErrors   metric.Int64Counter
	wakeups         metric.Int64Counter
	setDuration     metric.Float64Histogram // AcquireAll, TryAcquireAll, DoAll: the whole set
	setKeys         metric.Int64Histogram   // the keys of each set asked for

	// Precomputed attribute options (the backend alone, the backend with each
	// outcome), so recording without the key attribute allocates nothing.
	base     []metric.AddOption
	baseRec  []metric.RecordOption
	outcomes [len(outcomes)][]metric.RecordOption
	wakes    [driver.WakeTimer + 1][]metric.AddOption // by driver.WakeSource; [0] unused
}

func newTelemetry(opts options, d any) *telemetry {
	var o telOptions
	if opts.tel != nil {
		o = *opts.tel
	}
	t := &telemetry{backend: o.scheme, keyAttr: o.keyAttr, logger: o.logger}
	if t.backend == "" {
		t.backend = packageName(d)
	}
	tp := o.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if !isNoop(tp) {
		t.tracer = tp.Tracer(instrumentationName)
	}
	mp := o.meterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if !isNoop(mp) {
		t.metrics = newInstruments(mp.Meter(instrumentationName), t.backend)
	}
	if t.tracer != nil || t.metrics != nil || t.logger != nil {
		t.locks = map[*Lock]lockTel{}
	}
	return t
}

// isNoop reports whether p is a no-op provider: the noop packages' own, or
// the global provider before any was set (its delegating placeholder), which
// would record nothing either.
func isNoop(p any) bool {
	switch p.(type) {
	case tracenoop.TracerProvider, metricnoop.MeterProvider:
		return true
	}
	rt := reflect.TypeOf(p)
	return rt.Kind() == reflect.Pointer && strings.HasSuffix(rt.Elem().PkgPath(), "go.opentelemetry.io/otel/internal/global")
}

// packageName names a driver by its package ("memdriver") when no URL scheme
// is known (New).
func packageName(d any) string {
	rt := reflect.TypeOf(d)
	for rt != nil && rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	if rt == nil || rt.PkgPath() == "" {
		return "unknown"
	}
	p := rt.PkgPath()
	return p[strings.LastIndex(p, "/")+1:]
}

// Histogram bucket boundaries, in seconds. The SDK's default ones (0, 5, 10,
// 25, ... 10000) are made for milliseconds: in seconds they would put every
// acquisition below 5s in one bucket, and a quantile computed from the buckets
// (Prometheus' histogram_quantile) would mean nothing. Acquisitions take from
// a tenth of a millisecond (a local server) to the caller's timeout; holds
// from milliseconds to hours.
var (
	latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets    = []float64{0.001, 0.01, 0.1, 1, 10, 60, 300, 1800, 3600, 21600, 86400}
)

func newInstruments(m metric.Meter, backend string) *instruments {
	in := &instruments{}
	// Instrument creation fails only for invalid names or units, which are
	// constants here; the API returns a working no-op instrument then.
	in.acquireDuration, _ = m.Float64Histogram("distlock.acquire.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(latencyBuckets...),
		metric.WithDescription("Duration of Acquire, TryAcquire, Do's and Campaign's acquisition, by outcome."))
	in.waitDuration, _ = m.Float64Histogram("distlock.acquire.wait.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(latencyBuckets...),
		metric.WithDescription("Time from the start of a granted acquisition to the grant's arrival: one round trip when the first attempt won, the whole wait otherwise."))
	in.setDuration, _ = m.Float64Histogram("distlock.acquire.set.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(latencyBuckets...),
		metric.WithDescription("Duration of AcquireAll, TryAcquireAll and DoAll's acquisition of a whole set, by outcome."))
	in.setKeys, _ = m.Int64Histogram("distlock.acquire.set.keys", metric.WithUnit("{key}"), metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
		metric.WithDescription("Keys of each set AcquireAll, TryAcquireAll and DoAll asked for, de-duplicated."))
	in.holdDuration, _ = m.Float64Histogram("distlock.lock.hold.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(holdBuckets...),
		metric.WithDescription("How long a lock was held, from grant to release, loss or close."))
	in.held, _ = m.Int64UpDownCounter("distlock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now by this process."))
	in.losses, _ = m.Int64Counter("distlock.lock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Locks lost while held, by cause."))
	in.refreshes, _ = m.Int64Counter("distlock.lock.refreshes", metric.WithUnit("{refresh}"),
		metric.WithDescription("Refresh attempts, automatic and manual."))
	in.refreshFailures, _ = m.Int64Counter("distlock.lock.refresh.failures", metric.WithUnit("{refresh}"),
		metric.WithDescription("Refresh attempts that did not confirm the lock, by error class."))
	in.backendErrors, _ = m.Int64Counter("distlock.backend.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Backend failures, by class (unavailable: transient; backend: permanent)."))
	in.wakeups, _ = m.Int64Counter("distlock.acquire.wakeups", metric.WithUnit("{wakeup}"),
		metric.WithDescription("Wake-ups of waiting acquisitions, by what woke them: the backend's notification or a fallback timer."))
	set := attribute.NewSet(attrBackend.String(backend))
	in.base = []metric.AddOption{metric.WithAttributeSet(set)}
	in.baseRec = []metric.RecordOption{metric.WithAttributeSet(set)}
	for i, oc := range outcomes {
		in.outcomes[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrBackend.String(backend), attrOutcome.String(oc)))}
	}
	for s := driver.WakeNotified; s <= driver.WakeTimer; s++ {
		in.wakes[s] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrBackend.String(backend), attrWake.String(s.String())))}
	}
	return in
}

// attrs is the attribute list of one lock's measurements: the backend, the
// key when asked for, and extra.
func (t *telemetry) attrs(key string, extra ...attribute.KeyValue) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 2+len(extra))
	kv = append(kv, attrBackend.String(t.backend))
	if t.keyAttr {
		kv = append(kv, attrKey.String(key))
	}
	return append(kv, extra...)
}

func (t *telemetry) addOpts(key string, extra ...attribute.KeyValue) []metric.AddOption {
	if !t.keyAttr && len(extra) == 0 {
		return t.metrics.base
	}
	return []metric.AddOption{metric.WithAttributes(t.attrs(key, extra...)...)}
}

func (t *telemetry) recOpts(key string, extra ...attribute.KeyValue) []metric.RecordOption {
	if !t.keyAttr && len(extra) == 0 {
		return t.metrics.baseRec
	}
	return []metric.RecordOption{metric.WithAttributes(t.attrs(key, extra...)...)}
}

// wakeContext is the context of an acquisition of key: with metrics on, it
// carries the reporter through which an Acquirer counts its wake-ups
// (driver.Woke); otherwise it is ctx, and a driver's wake-up costs a context
// lookup.
func (t *telemetry) wakeContext(ctx context.Context, key string) context.Context {
	if t.metrics == nil {
		return ctx
	}
	return driver.WithWakeReporter(ctx, func(s driver.WakeSource) { t.woke(key, s) })
}

// woke counts one wake-up of a waiting acquisition of key; a source the
// driver package does not define is ignored.
func (t *telemetry) woke(key string, s driver.WakeSource) {
	m := t.metrics
	if m == nil || s < driver.WakeNotified || s > driver.WakeTimer {
		return
	}
	if t.keyAttr {
		m.wakeups.Add(context.Background(), 1, t.addOpts(key, attrWake.String(s.String()))...)
		return
	}
	m.wakeups.Add(context.Background(), 1, m.wakes[s]...)
}

// outcomeOf names an acquisition's outcome.
func outcomeOf(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrLocked):
		return 1
	case errors.Is(err, context.DeadlineExceeded):
		return 2
	case errors.Is(err, context.Canceled):
		return 3
	default:
		return 4
	}
}

// lossCauses maps a loss's cause to its class, most specific first.
var lossCauses = []struct {
	err   error
	class string
}{
	{ErrForceReleased, "force_released"},
	{ErrTakenOver, "taken_over"},
	{ErrServerChanged, "server_changed"},
	{ErrSessionExpired, "session_expired"},
	{ErrExpired, "expired"},
	{errDeadline, "expired"},
	{ErrClosed, "closed"},
	{ErrUnavailable, "unavailable"},
	{ErrNotHeld, "not_held"},
}

// lossCause is the class of a loss's cause: the distlock.loss.cause attribute.
func lossCause(cause error) string {
	for _, c := range lossCauses {
		if errors.Is(cause, c.err) {
			return c.class
		}
	}
	return "lost"
}

// errorClass is the error.type of a failure.
func errorClass(err error) string {
	switch {
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrBackend):
		return "backend"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrNotHeld):
		return "not_held"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	default:
		return "other"
	}
}

// backendResult notes a backend call's result: counts backend errors by class,
// and logs the backend unreachable (once, at Warn) and recovered (Info).
func (t *telemetry) backendResult(ctx context.Context, op, key string, err error) {
	if err == nil {
		if t.unreachable.Load() && t.unreachable.CompareAndSwap(true, false) && t.logger != nil {
			t.logger.LogAttrs(ctx, slog.LevelInfo, "distlock: backend recovered", slog.String("backend", t.backend), slog.String("op", op))
		}
		return
	}
	unavailable := errors.Is(err, ErrUnavailable)
	if !unavailable && !errors.Is(err, ErrBackend) {
		return // not a backend failure (locked, not held, cancelled)
	}
	if t.metrics != nil {
		cls := "backend"
		if unavailable {
			cls = "unavailable"
		}
		t.metrics.backendErrors.Add(ctx, 1, t.addOpts(key, attrErrorType.String(cls))...)
	}
	if unavailable && !t.unreachable.Load() && t.unreachable.CompareAndSwap(false, true) && t.logger != nil {
		t.logger.LogAttrs(ctx, slog.LevelWarn, "distlock: backend unreachable", slog.String("backend", t.backend), slog.String("op", op), slog.String("error", err.Error()))
	}
}

// acquireSpan is one acquisition's instrumentation; nil when nothing is on.
type acquireSpan struct {
	t         *telemetry
	set       int               // a set's acquisition (startAcquireSet): its size; 0 for one key
	span      trace.Span        // nil when not tracing
	parent    trace.SpanContext // the caller's span, the hold span's parent
	start     time.Time
	grantedAt time.Time // when the grant arrived
}

func (t *telemetry) startAcquire(ctx context.Context, op, key string) (context.Context, *acquireSpan) {
	if t.tracer == nil && t.metrics == nil {
		return ctx, nil
	}
	a := &acquireSpan{t: t, start: time.Now()}
	if t.tracer != nil {
		a.parent = trace.SpanContextFromContext(ctx)
		ctx, a.span = t.tracer.Start(ctx, "distlock."+op, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(t.attrs(key, attrOp.String(op))...))
	}
	return ctx, a
}

// attempt records one attempt's result as a span event.
func (a *acquireSpan) attempt(n int, err error) {
	if a == nil {
		return
	}
	if a.span != nil {
		res := outcomeAcquired
		if err != nil {
			res = errorClass(err)
			if errors.Is(err, ErrLocked) {
				res = outcomeLocked
			}
		}
		a.span.AddEvent("attempt", trace.WithAttributes(attribute.Int("distlock.attempt", n), attribute.String("distlock.result", res)))
	}
}

// granted notes the grant's arrival, the end of the wait. sent, when the
// granted request was sent, does not end it: a driver that hands the lock to a
// queued waiter (Redis) reports the sending of the queued request, before the
// wait, so that the validity is measured conservatively.
func (a *acquireSpan) granted(sent time.Time) {
	if a != nil {
		a.grantedAt = time.Now()
	}
}

// wait records a wait before the next attempt.
func (a *acquireSpan) wait(d time.Duration) {
	if a == nil || a.span == nil {
		return
	}
	a.span.AddEvent("wait", trace.WithAttributes(attribute.Float64("distlock.wait.seconds", d.Seconds())))
}

// startAcquireSet starts the span of a set's acquisition (its members'
// acquisitions nest under it) with the set's size; its end records the set
// instruments instead of the single-key ones.
func (t *telemetry) startAcquireSet(ctx context.Context, op string, size int) (context.Context, *acquireSpan) {
	if t.tracer == nil && t.metrics == nil {
		return ctx, nil
	}
	a := &acquireSpan{t: t, start: time.Now(), set: size}
	if t.tracer != nil {
		ctx, a.span = t.tracer.Start(ctx, "distlock."+op, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attrBackend.String(t.backend), attrOp.String(op), attrSetSize.Int(size)))
	}
	return ctx, a
}

func (a *acquireSpan) end(ctx context.Context, key string, err error) {
	if a == nil {
		return
	}
	now := time.Now()
	oc := outcomeOf(err)
	if m := a.t.metrics; m != nil && a.set > 0 {
		m.setDuration.Record(ctx, now.Sub(a.start).Seconds(), m.outcomes[oc]...)
		m.setKeys.Record(ctx, int64(a.set), m.baseRec...)
	} else if m != nil {
		if a.t.keyAttr {
			m.acquireDuration.Record(ctx, now.Sub(a.start).Seconds(), a.t.recOpts(key, attrOutcome.String(outcomes[oc]))...)
		} else {
			m.acquireDuration.Record(ctx, now.Sub(a.start).Seconds(), m.outcomes[oc]...)
		}
		if err == nil {
			w := 0.0
			if a.grantedAt.After(a.start) {
				w = a.grantedAt.Sub(a.start).Seconds()
			}
			m.waitDuration.Record(ctx, w, a.t.recOpts(key)...)
		}
	}
	if a.span != nil {
		a.span.SetAttributes(attrOutcome.String(outcomes[oc]))
		if err != nil && oc != 1 {
			a.span.RecordError(err, trace.WithAttributes(attrErrorType.String(errorClass(err))))
			a.span.SetStatus(codes.Error, errorClass(err))
		}
		a.span.End()
	}
}

// held records a grant: the held gauge, and the hold span that collects the
// lock's refreshes and ends with it. Called under the lock's shard's mu.
//
// The hold span is a sibling of the acquire span a, under the caller's span,
// with a link to a: the hold outlives the Acquire call, and a child that ends
// long after its parent confuses duration and critical-path views (the acquire
// span's self time, Jaeger's critical path), while the caller's span (a job,
// a request) is what the lock's life belongs to, and the link keeps the
// "granted by" relation that OpenTracing called FollowsFrom. Without a caller's
// span the hold span is the acquire span's child instead, so that the lock's
// life stays in one trace (a new root would split it, and a tail sampler would
// keep one half without the other).
func (t *telemetry) held(l *Lock, a *acquireSpan) {
	if t.locks == nil {
		return
	}
	{
		lt := lockTel{since: time.Now()}
		if t.metrics != nil {
			t.metrics.held.Add(context.Background(), 1, t.addOpts(l.req.Key)...)
		}
		if t.tracer != nil {
			ctx := context.Background()
			opts := []trace.SpanStartOption{trace.WithAttributes(t.attrs(l.req.Key)...)}
			if a != nil && a.span != nil {
				parent := a.parent
				if !parent.IsValid() {
					parent = a.span.SpanContext()
				}
				ctx = trace.ContextWithSpanContext(ctx, parent)
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: a.span.SpanContext()}))
			}
			_, lt.span = t.tracer.Start(ctx, "distlock.hold", opts...)
		}
		t.mu.Lock()
		t.grants++
		lt.grantSeq = t.grants
		t.locks[l] = lt
		t.mu.Unlock()
	}
	if t.logger != nil && t.logger.Enabled(context.Background(), slog.LevelDebug) {
		t.logger.LogAttrs(context.Background(), slog.LevelDebug, "distlock: lock acquired", slog.String("backend", t.backend), slog.String("key", l.req.Key))
	}
}

// refreshed records one refresh of l (err nil: confirmed).
func (t *telemetry) refreshed(l *Lock, err error) {
	ctx := context.Background()
	if t.metrics != nil {
		t.metrics.refreshes.Add(ctx, 1, t.addOpts(l.req.Key)...)
		if err != nil {
			t.metrics.refreshFailures.Add(ctx, 1, t.addOpts(l.req.Key, attrErrorType.String(errorClass(err)))...)
		}
	}
	if t.tracer != nil {
		t.mu.Lock()
		span := t.locks[l].span
		t.mu.Unlock()
		switch {
		case span == nil: // no longer held
		case err == nil:
			span.AddEvent("refresh")
		default:
			span.AddEvent("refresh", trace.WithAttributes(attrErrorType.String(errorClass(err))))
		}
	}
	t.backendResult(ctx, "refresh", l.req.Key, err)
}

// ended records the end of l's hold; called under the shard's mu by
// endLocked, once.
func (t *telemetry) ended(l *Lock, s lockState, cause error) {
	if t.locks == nil {
		return
	}
	ctx := context.Background()
	end := "released"
	switch s {
	case stateLost:
		end = "lost"
	case stateClosed:
		end = "closed"
	}
	t.mu.Lock()
	lt := t.locks[l]
	delete(t.locks, l)
	t.mu.Unlock()
	if m := t.metrics; m != nil {
		m.held.Add(ctx, -1, t.addOpts(l.req.Key)...)
		m.holdDuration.Record(ctx, time.Since(lt.since).Seconds(), t.recOpts(l.req.Key, attrEnd.String(end))...)
		if s == stateLost {
			m.losses.Add(ctx, 1, t.addOpts(l.req.Key, attrCause.String(lossCause(cause)))...)
		}
	}
	if span := lt.span; span != nil {
		span.SetAttributes(attrEnd.String(end))
		if s == stateLost {
			span.SetAttributes(attrCause.String(lossCause(cause)))
			span.RecordError(cause, trace.WithAttributes(attrErrorType.String("lost")))
			span.SetStatus(codes.Error, "lost: "+lossCause(cause))
		}
		span.End()
	}
	if t.logger != nil {
		switch {
		case s == stateLost:
			t.serverChanged(ctx, lt.grantSeq, cause)
			t.logger.LogAttrs(ctx, slog.LevelWarn, "distlock: lock lost", slog.String("backend", t.backend), slog.String("key", l.req.Key),
				slog.String("cause", lossCause(cause)), slog.String("error", cause.Error()))
		case t.logger.Enabled(ctx, slog.LevelDebug):
			t.logger.LogAttrs(ctx, slog.LevelDebug, "distlock: lock "+end, slog.String("backend", t.backend), slog.String("key", l.req.Key))
		}
	}
}

// serverChanged logs, at Warn, that the backend server was restarted or
// replaced when l was lost for that reason (ErrServerChanged), once per
// change rather than once per lock: every lock granted before the change
// logged last is lost to that same change, so only the loss of a lock
// granted after it tells of a new one. (Two servers of a cluster replaced
// at once make one line.)
func (t *telemetry) serverChanged(ctx context.Context, grantSeq uint64, cause error) {
	if !errors.Is(cause, ErrServerChanged) {
		return
	}
	t.mu.Lock()
	if grantSeq <= t.changeLogged {
		t.mu.Unlock()
		return
	}
	t.changeLogged = t.grants
	t.mu.Unlock()
	t.logger.LogAttrs(ctx, slog.LevelWarn, "distlock: backend server identity changed", slog.String("backend", t.backend), slog.String("error", cause.Error()))
}

// releaseSpan traces one Release call; it returns ctx unchanged and a nil
// span when not tracing.
func (t *telemetry) startRelease(ctx context.Context, key string) (context.Context, trace.Span) {
	if t.tracer == nil {
		return ctx, nil
	}
	return t.tracer.Start(ctx, "distlock.release", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(t.attrs(key)...))
}

func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err, trace.WithAttributes(attrErrorType.String(errorClass(err))))
		span.SetStatus(codes.Error, errorClass(err))
	}
	span.End()
}
