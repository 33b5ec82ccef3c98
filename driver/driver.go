// Package driver defines the small interface a distlock backend implements, the
// capabilities it declares, and the URL scheme registry that lock.Open dispatches on.
//
// Users of locks never import this package; they use package lock. Authors of a
// backend implement Driver, register a scheme in init, and prove their driver with
// conformance.Run. The portable layer (package lock) owns everything that must behave
// the same on every backend: key and option validation, waiting with backoff for
// drivers that cannot be woken, automatic refresh, the validity deadline behind
// Lost(), Do, error wrapping and Close. A driver speaks its backend's protocol and
// reports facts.
package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors a driver returns (possibly wrapped with %w together with the
// backend's own error). Package lock re-exports them, so errors.Is works against
// lock.ErrLocked and friends.
var (
	// ErrLocked is returned by TryAcquire when another owner holds the key.
	ErrLocked = errors.New("held by another owner")

	// ErrNotHeld is returned by Refresh and Release when the key is not held by the
	// given owner (it expired, was released, or passed to someone else).
	ErrNotHeld = errors.New("not held")

	// ErrUnsupported is returned when a request needs a capability the driver
	// does not declare.
	ErrUnsupported = errors.New("not supported by this driver")

	// ErrInvalidArgument is returned for a request the backend can tell is
	// wrong: a key used as a semaphore with another number of permits, or as a
	// semaphore and as a lock at once.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrClosed is returned by a driver used after Close.
	ErrClosed = errors.New("locker closed")

	// ErrInvalidURL is what an Opener wraps for a URL it cannot use: an unknown
	// parameter, a bad value, a missing host or path.
	ErrInvalidURL = errors.New("invalid URL")

	// ErrUnavailable marks a transient failure: the backend could not be reached
	// or could not serve the request now (connection refused or reset, a timeout,
	// a failover or election under way, a server still loading, no quorum). The
	// outcome of the request is unknown and a later attempt may succeed, so the
	// portable layer retries it with backoff for as long as the caller's context
	// allows. A driver wraps what its client reports this way; plain network
	// errors (net.Error, ECONNREFUSED, ECONNRESET, EOF) are recognised without it.
	// Every other error from a driver is taken as permanent (authentication,
	// permission, a wrong key type, bad configuration) and fails the call at once.
	ErrUnavailable = errors.New("backend unavailable")
)

// Driver is a connection to one backend, as one process would hold it.
//
// Locks are identified by (Key, Owner): Owner is a string the portable layer makes
// for each Acquire call, unique across calls, Lockers, processes and restarts, and
// keeps across retries of that call. It is 25 to 40 characters of [0-9a-f] (a
// random prefix drawn once per Locker, then the Locker's count of calls), so a
// driver may use it in names, scripts and separated values. Every method is safe
// for concurrent use.
type Driver interface {
	// Capabilities reports what the driver guarantees. It must return the same value
	// for the life of the driver.
	Capabilities() Capabilities

	// TryAcquire makes exactly one attempt to take the lock and never waits for it:
	// it returns ErrLocked when another owner holds the key. If the key is already
	// held by req.Owner (a retry after a lost reply) it succeeds and returns the
	// same grant, so a retry can neither orphan a lock nor block its own owner.
	TryAcquire(ctx context.Context, req *Request) (Grant, error)

	// Refresh confirms that req.Owner still holds req.Key and, for drivers whose locks
	// expire, extends the lock to req.TTL from now. It returns ErrNotHeld when the
	// lock is no longer ours; it never re-creates a lock that is gone.
	//
	// After Refresh returns ErrNotHeld, or after the driver called req.Lost, the
	// portable layer considers the lock ended and does not call Release for it: the
	// driver frees whatever it kept for the lock (a descriptor, a map entry) itself.
	Refresh(ctx context.Context, req *Request) error

	// Release gives up the lock if req.Owner holds it, and returns ErrNotHeld if it
	// does not. It never removes a lock held by another owner. For a request that is
	// still waiting inside Acquire it must also leave no queue entry behind.
	Release(ctx context.Context, req *Request) error

	// Close releases the driver's resources. Locks still held are released by the
	// backend as if the process had ended (session closed) or left to expire.
	// Calls after Close return ErrClosed; calling Close again returns nil.
	Close() error
}

// Acquirer is implemented by drivers whose backend can wake a waiter (watch,
// pub/sub, blocking SQL, a kernel lock queue). The portable layer prefers it to
// polling TryAcquire with backoff.
type Acquirer interface {
	// Acquire blocks until req.Owner holds req.Key or ctx is done, and returns
	// ctx.Err() in that case, leaving nothing behind. Like TryAcquire it succeeds at
	// once if the key already holds req.Owner. It reports each time its wait
	// wakes up, and what woke it, with Woke(ctx, source).
	Acquire(ctx context.Context, req *Request) (Grant, error)
}

// SetAcquirer is implemented by drivers that can take several keys in one
// request, all or nothing (a script over keys in one Redis hash slot, an etcd
// transaction, one statement on one session). The portable layer tries it
// first for AcquireAll and TryAcquireAll, and takes the keys one at a time, in
// order, when it does not grant them.
type SetAcquirer interface {
	// TryAcquireSet makes one attempt to take every request's key at once:
	// every one granted, or none. reqs have distinct keys, in byte order,
	// each with an owner of its own. It returns one Grant per request, in
	// order; ErrLocked when any key is held or has waiters it may not pass
	// (the backend's queue rules hold as for TryAcquire), with nothing taken;
	// ErrUnsupported when these keys cannot be taken in one request (say,
	// keys in several Redis Cluster slots), with nothing taken. Any other
	// error leaves the outcome unknown, as for TryAcquire: the portable layer
	// releases every request (owner-checked) before it goes on.
	TryAcquireSet(ctx context.Context, reqs []*Request) ([]Grant, error)
}

// CheckSet returns ErrInvalidArgument, naming the driver, unless reqs are a
// set as TryAcquireSet receives one: distinct keys, in byte order. Package
// lock sends only such sets; a driver checks with it first, so that another
// caller's mistake takes nothing.
func CheckSet(name string, reqs []*Request) error {
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Key <= reqs[i-1].Key {
			return fmt.Errorf("%w: %s: a set's keys must be distinct and in byte order (%q after %q)", ErrInvalidArgument, name, reqs[i].Key, reqs[i-1].Key)
		}
	}
	return nil
}

// BatchRefresher is implemented by drivers that can confirm many locks in one
// round trip (pipelining). The portable layer uses it for automatic refresh when
// several locks of one Locker are due together.
type BatchRefresher interface {
	// RefreshBatch refreshes every request and returns one error per request
	// (nil for success), in order.
	RefreshBatch(ctx context.Context, reqs []*Request) []error
}

// Request describes one lock attempt. The portable layer fills it in and keeps the
// same pointer for every call about that lock (acquire, retries, refresh, release),
// so a driver may use it as a map key.
type Request struct {
	// Key is the user's key: non-empty valid UTF-8, at most MaxKeyLen bytes. A
	// driver must map distinct keys to distinct locks (or, for hashed ids, to
	// distinct locks except for a documented collision probability).
	Key string

	// Owner identifies this holder; unique per Acquire call, stable across
	// retries; 25 to 40 characters of [0-9a-f] (see Driver).
	Owner string

	// TTL is how long the lock lives without a refresh on drivers whose locks
	// expire (Capabilities.Expiring). Session-bound drivers may ignore it.
	TTL time.Duration

	// Shared asks for a shared (read) lock; only set when Capabilities.Shared.
	Shared bool

	// Permits, when at least 2, makes the key a counting semaphore of that many
	// permits and asks for one of them; only set when Capabilities.Permits, and
	// never together with Shared. Zero asks for the exclusive (or shared) lock;
	// the portable layer sends a semaphore of one permit as the exclusive lock.
	// A driver that can see another number of permits in use on the key (or the
	// key in use as a lock) returns ErrInvalidArgument.
	Permits int

	// Label is what the holder publishes beside its hold, encoded by the
	// portable layer (an owner name, and a leader's value): a driver that
	// implements Inspector stores it with the hold and reports it unchanged
	// in Holder.Label. At most MaxLabelLen bytes of valid UTF-8.
	Label string

	// Lost is set by the portable layer. A driver calls its Lost method (from
	// any goroutine, any number of times, without holding its own locks) when it
	// learns that the lock is gone without a Refresh or Release having told the
	// caller: session expired, connection dropped, our node or key deleted. It
	// must not block.
	Lost LossReporter
}

// LossReporter is what Request.Lost holds: where a driver reports a lock it
// learned is gone. It is an interface rather than a function so that the
// portable layer can pass the lock itself and a held lock costs no closure.
type LossReporter interface {
	// Lost reports that the lock is gone, and why (an error matching
	// ErrNotHeld, with a loss cause where the driver can tell it).
	Lost(err error)
}

// LostFunc makes a function a LossReporter (for a driver's own tests, or a
// program that uses a driver without package lock).
type LostFunc func(err error)

// Lost calls f(err).
func (f LostFunc) Lost(err error) { f(err) }

// WakeSource says what woke a waiting Acquire: see Woke.
type WakeSource uint8

const (
	// WakeNotified: the backend said the lock changed, or granted it (a
	// release notification, a watch event, a pub/sub handoff, the server's
	// own lock queue).
	WakeNotified WakeSource = iota + 1
	// WakeTimer: the waiter's own fallback fired (a poll, a re-check timer,
	// the end of a holder's lease, a re-check after the notification channel
	// came back).
	WakeTimer
)

// String names the source as the distlock.wakeup.source metric attribute does.
func (s WakeSource) String() string {
	switch s {
	case WakeNotified:
		return "notification"
	case WakeTimer:
		return "timer"
	}
	return "unknown"
}

// wakeKey is the context key of a wake-up reporter.
type wakeKey struct{}

// WithWakeReporter returns a copy of ctx that carries report, for Woke. The
// portable layer sets it on the context of Acquire only when it records
// metrics, so that a Request costs nothing more without them; report must
// not block.
func WithWakeReporter(ctx context.Context, report func(WakeSource)) context.Context {
	return context.WithValue(ctx, wakeKey{}, report)
}

// Woke is how an Acquirer reports that its waiting Acquire woke up to look at
// the lock again, or was granted it by the server, and what woke it: ctx is
// the context of Acquire (or one derived from it). The first attempt of an
// Acquire is not a wake-up. Call it once per wake-up, without holding the
// driver's own locks; it does not block, and costs a context lookup when no
// reporter is set.
func Woke(ctx context.Context, source WakeSource) {
	if report, ok := ctx.Value(wakeKey{}).(func(WakeSource)); ok {
		report(source)
	}
}

// MaxKeyLen is the longest key, in bytes, that every driver accepts.
const MaxKeyLen = 1024

// MaxLabelLen is the longest Request.Label, in bytes.
const MaxLabelLen = 4096

// Grant is what a driver reports about a lock it just acquired.
type Grant struct {
	// Token is the fencing token: at least 1 and strictly greater than every token
	// earlier granted for the same key, when Capabilities.Fencing is set, whatever
	// the shape (exclusive, shared or permit) of either grant, so that a writer's
	// token fences every reader before it. Zero otherwise.
	Token uint64

	// Start is when the request that took the lock was sent, read from time.Now
	// before sending. The portable layer measures the validity deadline from it.
	// Zero means the start of the TryAcquire or Acquire call, which is right for
	// one round trip but too early for an Acquire that waited: a blocking Acquire
	// should set it.
	Start time.Time
}

// Capabilities are facts about a driver that the portable layer and the
// conformance suite read.
type Capabilities struct {
	// Fencing: Grant.Token strictly increases for successive holders of a key,
	// across clients, expiry, client restarts, and backend restarts wherever the
	// backend keeps data.
	Fencing bool

	// Expiring: a lock lives for its TTL unless refreshed (a lease). When false,
	// the lock is session-bound: it lives until released or until the client's
	// session (connection, process, file descriptor) ends, and TTL only bounds how
	// long the portable layer trusts the lock without a confirmed Refresh.
	Expiring bool

	// Notify: the driver implements Acquirer and its waiters are woken by the
	// backend when the lock is released, not by polling.
	Notify bool

	// FIFO: waiters are granted the lock in arrival order.
	FIFO bool

	// Shared: the driver supports shared (read) locks through Request.Shared.
	Shared bool

	// WriterPreference: with Shared, a waiting exclusive request holds back the
	// shared requests that arrive after it (those that arrived before it keep
	// their turn), so a stream of overlapping readers cannot starve a writer.
	// The driver's package doc states its exact queueing rule.
	WriterPreference bool

	// Permits: the driver supports counting semaphores through Request.Permits:
	// at most that many holders of the key at once, each with its own owner,
	// refresh, release and (with Fencing) token.
	Permits bool

	// MinTTL is the shortest TTL Acquire accepts: the longer of the backend's
	// own minimum (for example etcd's minimum lease TTL) and FloorTTL. The
	// portable layer rejects shorter TTLs with a clear error rather than
	// letting the server raise them. A driver states the range exactly (the
	// conformance suite checks that both ends are accepted and that just
	// outside is refused); a zero is read as FloorTTL, and Locker.Capabilities
	// reports it so.
	MinTTL time.Duration

	// MaxTTL is the longest TTL Acquire accepts: the shorter of what the driver
	// can carry without overflow or loss of meaning (a lease in whole seconds,
	// milliseconds in a 64-bit argument) and DefaultMaxTTL. The portable layer
	// rejects longer TTLs, so a driver never sees a TTL above it and its
	// duration arithmetic cannot overflow. A zero, or anything longer than
	// DefaultMaxTTL, is read as DefaultMaxTTL, and Locker.Capabilities reports
	// it so.
	MaxTTL time.Duration
}

// DefaultMaxTTL is the longest TTL the portable layer accepts on any driver: far
// beyond any sensible lease, and far enough from the limits of time.Duration that
// adding it to a time, rounding it up or converting it to a backend's unit never
// overflows.
const DefaultMaxTTL = 366 * 24 * time.Hour

// FloorTTL is the shortest TTL the portable layer accepts on any driver: below
// it the drift allowance (Drift: 2ms plus 1% of the TTL) would take most of the
// lease, and no grant could be returned with validity left.
const FloorTTL = 10 * time.Millisecond

// TTLRange is the range of TTLs the portable layer accepts for a driver with
// these capabilities: [max(MinTTL, FloorTTL), min(MaxTTL, DefaultMaxTTL)]. For
// a driver that states its range exactly, as every driver of this repository
// does, that is [MinTTL, MaxTTL].
func (c Capabilities) TTLRange() (min, max time.Duration) {
	min, max = c.MinTTL, c.MaxTTL
	if min < FloorTTL {
		min = FloorTTL
	}
	if max <= 0 || max > DefaultMaxTTL {
		max = DefaultMaxTTL
	}
	return min, max
}
