package lock

import (
	"fmt"
	"log/slog"
	"math/rand"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/distlock/lock/internal/durtext"
)

// DefaultTTL is the lock TTL when no WithTTL option is given.
const DefaultTTL = 30 * time.Second

// Option configures a Locker (as a default, given to Open or New) or one call
// (given to Acquire, TryAcquire or Do, where it overrides the default). The same
// options serve both places, so per-call settings read the same as defaults.
type Option func(*options)

// AcquireOption is the option type of Acquire, TryAcquire and Do. It is Option:
// every option can be a Locker default or a per-call override.
type AcquireOption = Option

type options struct {
	ttl          time.Duration
	autoRefresh  bool
	shared       bool
	required     capSet // WithRequired's capabilities (in the padding after the bools)
	permits      int    // 0: not a semaphore (WithPermits not given)
	backoff      Backoff
	closeTimeout time.Duration
	grace        time.Duration
	ownerName    string // WithOwnerName; empty: host:pid
	value        string // a leader's published value (Campaign)
	err          error  // first invalid option value, reported by validate

	// Locker settings for telemetry, nil when none was given. Behind a
	// pointer (copied on write by its options) so that the options every
	// call copies do not grow.
	tel *telOptions
}

// telOptions are the telemetry settings of a Locker (see telemetry.go).
type telOptions struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	keyAttr        bool
	logger         *slog.Logger
	scheme         string
}

// setTel changes a copy of o's telemetry settings: options values share the
// pointer, so it is never written through.
func (o *options) setTel(f func(*telOptions)) {
	var t telOptions
	if o.tel != nil {
		t = *o.tel
	}
	f(&t)
	o.tel = &t
}

func defaultOptions() options {
	return options{ttl: DefaultTTL, autoRefresh: true, backoff: DefaultBackoff, closeTimeout: DefaultCloseTimeout}
}

// DefaultCloseTimeout bounds how long Locker.Close spends releasing locks when
// no WithCloseTimeout option or close_timeout URL parameter is given.
const DefaultCloseTimeout = 5 * time.Second

// DefaultOpenTimeout bounds Open when its context has no deadline and the URL
// has no open_timeout parameter: connecting, authenticating and the driver's
// checks of the server together.
const DefaultOpenTimeout = 10 * time.Second

// WithGrace reserves d of every validity window for the holder to stop its
// work: Lost closes d earlier than it would otherwise (the last confirmed
// refresh + TTL − drift), so work that stops within d of Lost is over before an
// expiring backend (Redis, Redlock, etcd, mem) can give the lock to someone else.
// It must be shorter than half the TTL, so that refreshes still fit in the rest.
// On session-bound backends the lock stays held until Release anyway (see
// Release), so a grace is not needed there. The default is 0. A grace
// shortens the time refreshes may fail before Lost closes by as much;
// docs/TUNING.md in the repository has worked settings.
func WithGrace(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.fail(fmt.Errorf("%w: grace %s is negative", ErrInvalidArgument, durtext.Format(d)))
		}
		o.grace = d
	}
}

// WithCloseTimeout bounds how long Locker.Close spends releasing the locks it
// still holds on an unresponsive backend (default DefaultCloseTimeout). It is a
// Locker setting: given to Open or New; per call it has no effect.
func WithCloseTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.fail(fmt.Errorf("%w: close timeout %s is not positive", ErrInvalidArgument, durtext.Format(d)))
			return
		}
		o.closeTimeout = d
	}
}

// WithTTL sets how long a lock lives without a refresh. On drivers whose locks
// expire (Redis, etcd, mem) it is the lease the backend enforces. On session-bound
// drivers (PostgreSQL, ZooKeeper, file), where a lock lives as long as its session,
// it bounds how long the lock is trusted without a confirmed check of that session:
// Lost closes if no check succeeds within the TTL. It must be positive. The
// default is DefaultTTL; a held lock is refreshed every third of its TTL.
// docs/TUNING.md in the repository says how to choose it: failover time
// against false losses against server load, with measured figures per backend.
func WithTTL(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.fail(fmt.Errorf("%w: TTL %s is not positive", ErrInvalidArgument, durtext.Format(d)))
		}
		o.ttl = d
	}
}

// WithAutoRefresh turns automatic refresh of held locks on (the default) or off.
// With it off, a lock on an expiring backend lives for its TTL unless the holder
// calls Refresh; session-bound drivers cannot expire a lock, so turning it off
// there makes Acquire return ErrUnsupported.
func WithAutoRefresh(on bool) Option {
	return func(o *options) { o.autoRefresh = on }
}

// WithShared asks for a shared (read) lock: many shared holders at once, exclusive
// holders alone. Drivers without shared locks return ErrUnsupported. On drivers
// with writer preference (driver.Capabilities.WriterPreference) a waiting
// exclusive request holds back the shared requests that arrive after it, so
// readers cannot starve a writer; elsewhere a stream of readers may.
func WithShared(shared bool) Option {
	return func(o *options) { o.shared = shared }
}

// WithPermits makes the key a counting semaphore of n permits: at most n
// holders at once, each with its own Lock (its own Lost, refresh, release and
// fencing token). Every user of the key must give the same n; a backend that
// can see a different n in use (or the key in use as a lock) returns
// ErrInvalidArgument, one that cannot lets the larger n decide. n = 1 is the
// exclusive lock, on every driver; n < 1, or WithPermits together with
// WithShared(true), is ErrInvalidArgument; n > 1 on a driver without
// semaphores (driver.Capabilities.Permits) is ErrUnsupported.
func WithPermits(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.fail(fmt.Errorf("%w: %d permits; a semaphore needs at least 1", ErrInvalidArgument, n))
			return
		}
		o.permits = n
	}
}

// WithBackoff sets how Acquire waits between attempts on drivers that cannot be
// woken by their backend, and between retries after a backend error.
func WithBackoff(b Backoff) Option {
	return func(o *options) {
		if b.Min <= 0 || b.Max < b.Min {
			o.fail(fmt.Errorf("%w: backoff needs 0 < Min <= Max, got Min %v Max %v", ErrInvalidArgument, b.Min, b.Max))
		}
		o.backoff = b
	}
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func (o options) apply(opts []Option) options {
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// Backoff is an exponential backoff with full jitter: each wait is a random
// duration between half and all of the current step, and the step doubles from Min
// up to Max.
type Backoff struct {
	Min, Max time.Duration
}

// DefaultBackoff is used when no WithBackoff option is given.
var DefaultBackoff = Backoff{Min: 5 * time.Millisecond, Max: 250 * time.Millisecond}

// backoffState is one call's progress through a Backoff; it is made fresh per call.
type backoffState struct {
	b    Backoff
	step time.Duration
}

func (s *backoffState) next() time.Duration {
	if s.step == 0 {
		s.step = s.b.Min
	}
	d := s.step/2 + time.Duration(rand.Int63n(int64(s.step/2)+1))
	if s.step *= 2; s.step > s.b.Max {
		s.step = s.b.Max
	}
	return d
}
