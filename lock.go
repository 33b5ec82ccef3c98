// Package lock is one distributed-lock API over Redis/Valkey, PostgreSQL advisory
// locks, etcd leases, ZooKeeper ephemeral nodes, flock(2) files and an in-process
// store. A program picks its backend with a connection URL; swapping one backend
// for another is a configuration change, not a code change.
//
//	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL"))
//	...
//	defer locker.Close()
//	err = locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
//		// ctx is cancelled if the lock is lost.
//		return charge(ctx, invoice)
//	})
//
// AcquireAll, TryAcquireAll and DoAll take several keys at once, all or
// nothing, in one canonical order so that overlapping sets cannot deadlock.
//
// # Backends and URLs
//
// A driver registers its URL schemes when its package is imported, as
// database/sql drivers do, so a blank import makes its scheme work with Open:
//
//	import _ "github.com/distlock/lock/filedriver"
//
//	mem://name                  in-process (memdriver), for unit tests
//	file:///var/lock/myapp      flock(2) files in a directory (filedriver)
//
// Every URL also accepts the portable parameters ttl (a Go duration, e.g.
// ttl=10s), auto_refresh (true or false), prefix (the namespace every key
// lives under), open_timeout (how long Open may take when its context has no
// deadline; default 10s) and close_timeout (how long Close may spend releasing
// locks on an unresponsive backend; default 5s); they set the Locker's defaults. A driver's own parameters are
// listed in its package documentation; an unknown parameter is an error. Users
// who already have a client build a driver from it and pass it to New.
//
// # Errors
//
// Every error is an *Error naming the operation and key. This is the complete
// list of the package's errors; each is matched with errors.Is (errors.go
// gives each one's full comment). Every returned error matches one of these
// kinds, or is the context's error when the call's context ended (joined with
// the last ErrUnavailable failure, if the backend was failing meanwhile):
//
//   - ErrLocked: TryAcquire found the key held by another owner.
//   - ErrNotHeld: Refresh or Release of a lock that is no longer ours.
//   - ErrLost: Do's function ran while the lock was lost; Refresh or Release
//     of a lock whose Lost channel has closed. Lock.Err matches it with one
//     of the causes below.
//   - ErrClosed: a call on a closed Locker, an Acquire that Close interrupted.
//   - ErrInvalidKey: an empty key, one over 1024 bytes, or not valid UTF-8.
//   - ErrInvalidArgument: a nil context, a TTL out of the backend's range, a
//     bad option value.
//   - ErrUnsupported: a shape, option, fencing token or operator call the
//     driver cannot serve.
//   - ErrInvalidURL: Open's URL does not parse, has no scheme, or carries a
//     bad parameter.
//   - ErrUnknownScheme: no driver registered the URL's scheme; the message
//     names the import that registers it.
//   - ErrUnavailable: a transient backend failure (unreachable, restarting,
//     failing over, no quorum), retried by Acquire until its context ends.
//   - ErrBackend: a permanent backend failure (authentication, permission, a
//     key of the wrong type), never retried.
//   - ErrNoLeader: Leader found no one leading the election.
//
// Why a lock was lost (Lock.Err, and context.Cause of Do's context, match one
// of these besides ErrLost, or ErrClosed, or what else the backend reported):
//
//   - ErrExpired: no refresh was confirmed before the validity deadline.
//   - ErrTakenOver: the backend showed another owner holding the lock.
//   - ErrServerChanged: the server holding it restarted or failed over.
//   - ErrSessionExpired: the session it was bound to ended (connection,
//     ZooKeeper session, etcd lease).
//   - ErrForceReleased: an operator freed it with ForceRelease, where the
//     backend can tell.
//
// Drivers' own errors, for a finer match, come wrapped inside the kinds above
// (each driver's package doc says when): redisdriver.ErrWrongType,
// redisdriver.ErrForeignData and redlockdriver.ErrWrongType (ErrBackend);
// redisdriver.ErrServerChanged (with ErrServerChanged);
// redlockdriver.ErrNoQuorum (ErrUnavailable, or ErrBackend when servers that
// refused for good stand in the way); redlockdriver.ErrForgotten (a loss
// cause, with ErrExpired or ErrServerChanged); pgadvisory.ErrFenceSequence
// (ErrBackend); pgadvisory.ErrTransactionPooler (ErrUnsupported). Package
// gocronlock's Elector returns gocronlock.ErrNotLeader from IsLeader.
//
// Package fence, on the resource's side: fence.ErrStale (a token below the
// highest the resource admitted: a newer holder exists; also what
// redisdriver.Fenced and etcddriver.Fenced refuse with), fence.ErrZeroToken,
// fence.ErrInvalidResource and fence.ErrMalformedHeader (each matching
// ErrInvalidArgument).
//
// Backend failures are classed once, here: transient ones (ErrUnavailable)
// are retried by Acquire until its context ends; permanent ones (ErrBackend)
// fail at once. Where a backend reported an error, errors.As reaches it too.
// No error or String method ever prints a password from a URL.
//
// # Fencing
//
// No lease-based lock can promise that two processes never both believe they hold
// it: a holder can pause (GC, swap, SIGSTOP) past its TTL, or its messages can be
// delayed. What the package promises instead is a fencing token: Token strictly
// increases for successive holders of a key, across clients, expiry and restarts
// wherever the backend keeps data. Pass it to the resource you protect and have the
// resource reject a token lower than the highest it has seen, and admit an equal
// one (a holder writes many times with its token):
//
//	UPDATE invoices SET ..., fence = $2 WHERE id = $1 AND fence <= $2
//
// Package fence is that check for the stores people guard (an SQL table in the
// write's transaction, an in-process resource, an HTTP service); FromContext gives
// the function Do runs its Lock, and so its token; WithRequired makes Open refuse a
// backend without fencing.
//
// # Read-write locks and semaphores
//
// Besides the exclusive lock, a key can be a read-write lock (WithShared: many
// readers at once, a writer alone) or a counting semaphore (WithPermits(n): at
// most n holders at once). Each holder has its own Lock, with its own Lost
// channel, refresh, release and fencing token, and every grant's token is
// larger than every token granted before it on the key, whatever its shape, so
// a writer's token fences every reader before it. A driver declares the shapes
// it offers in driver.Capabilities (Shared, WriterPreference, Permits); a shape
// it lacks is ErrUnsupported before the backend is asked.
//
// # Lost locks
//
// Lost returns a channel that closes when the lock may no longer be held: the
// backend said so (refresh found another owner or none, session expired,
// connection dropped), or no refresh could be confirmed before the validity
// deadline (the time of the last confirmed refresh plus the TTL, minus a drift
// allowance of 1% of the TTL + 2ms, measured on the monotonic clock). On expiring
// backends the deadline passes before the backend can give the lock to someone
// else, unless the holder's process was paused or its clock runs slow. Do cancels
// the function's context when the lock is lost. Acquire never returns a lock with
// less than a third of its TTL of validity left: a grant that arrives later than
// that (the backend stalled with the request in flight) is given back.
//
// A lock lost by its deadline is not released behind the holder's back: on a
// session-bound backend the session may still hold it, and nobody else gets it
// until the holder's Release (or the end of Do, or Close) frees it, so a holder
// that stops its work before releasing never overlaps the next one.
//
// # Limits
//
// A process paused longer than its TTL (a stop-the-world pause, SIGSTOP, a VM
// migration) wakes up believing it still holds the lock until its own code checks
// Lost; only fencing tokens protect the resource in that window. A backend that
// loses data (a Redis without persistence that restarts, a failover to a replica
// that had not seen the write) may give the lock to a second holder; drivers detect
// what they can and close Lost. Keys map to locks injectively on every backend
// except PostgreSQL, whose 64-bit lock ids can collide with probability ~2^-64 per
// pair, which adds waiting but never breaks exclusion.
package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/driver"
)

// Capabilities describes what a Locker's driver guarantees.
type Capabilities = driver.Capabilities

// Locker takes locks on one backend. It is safe for concurrent use; one Locker
// per process and backend is the intended use, and it can hold thousands of locks
// without a goroutine or connection per lock.
type Locker struct {
	d        driver.Driver
	acquirer driver.Acquirer       // nil when the driver cannot be woken
	batch    driver.BatchRefresher // nil when the driver cannot batch
	caps     driver.Capabilities
	defaults options
	name     string // for String: a redacted URL or the driver's type
	tel      *telemetry

	closeMu    sync.Mutex         // serialises Close; nothing else takes it
	closed     bool               // guarded by closeMu
	shards     []shard            // the held locks and their schedule, in shards (refresh.go)
	epoch      time.Time          // the origin of the Locker's instants (refresh.go)
	calls      context.Context    // done when Close begins: the context of calls whose own cannot end
	endCalls   context.CancelFunc // cancels calls
	gate       *callGate          // counts calls in flight, and their cleanups (calls.go)
	callShards *[callShards]callShard
	owners     ownerSource                // the owner ids of this Locker's requests (owner.go)
	labels     atomic.Pointer[labelCache] // the label encoded last (label.go)

	// Three contexts, because Close ends three kinds of work at three moments:
	// calls (above) is done as Close begins, so that an Acquire whose own
	// context cannot end gives up and Close need not wait for it; ctx is done
	// once the interrupted acquires have cleaned up, ending the refreshes in
	// flight before Close releases what is held; cleanupCtx is done only when
	// Close's close_timeout runs out (or Close returns), so that the cleanups
	// of interrupted acquires (releasing a grant that arrived too late) get
	// all of that time.
	// Merged, either the cleanups would be cut at Close's start or the
	// refreshes would run on beside Close's releases.
	cleanupCtx context.Context    // done when Close's time is up: ends cleanups in flight
	endCleanup context.CancelFunc // cancels cleanupCtx
	ctx        context.Context    // done once interrupted acquires have drained: ends background work (refreshes)
	cancel     context.CancelFunc // cancels ctx
	wg         sync.WaitGroup     // the scheduler passes (and their refreshes) in flight
}

// New returns a Locker over a driver built by the caller, for example from a
// client the program already has. Options set the defaults of every call; an
// invalid option, or a WithRequired capability the driver lacks, is reported by
// every call that uses it (New itself cannot fail).
func New(d driver.Driver, opts ...Option) *Locker {
	lk := &Locker{
		d:        d,
		caps:     enforcedCapabilities(d.Capabilities()),
		defaults: defaultOptions().apply(opts),
		name:     driverName(d),
		epoch:    time.Now(),
	}
	lk.shards = make([]shard, numShards())
	for i := range lk.shards {
		lk.shards[i].lk = lk
		lk.shards[i].armed = instant(1<<63 - 1) // no timer yet
	}
	lk.ctx, lk.cancel = context.WithCancel(context.Background())
	lk.calls, lk.endCalls = context.WithCancel(context.Background())
	lk.gate = newCallGate()
	lk.callShards = new([callShards]callShard)
	lk.owners.init()
	lk.cleanupCtx, lk.endCleanup = context.WithCancel(context.Background())
	lk.tel = newTelemetry(lk.defaults, d)
	if lu, ok := d.(driver.LoggerUser); ok && lk.tel.logger != nil {
		lu.UseLogger(lk.tel.logger)
	}
	lk.acquirer, _ = d.(driver.Acquirer)
	lk.batch, _ = d.(driver.BatchRefresher)
	return lk
}

// Capabilities reports what the Locker's driver guarantees. Its MinTTL and
// MaxTTL are the TTLs Acquire accepts, both ends included.
func (lk *Locker) Capabilities() Capabilities { return lk.caps }

// enforcedCapabilities is c with MinTTL and MaxTTL set to the range validate
// enforces, so that what a Locker reports is what it accepts even for a
// driver that leaves them zero.
func enforcedCapabilities(c driver.Capabilities) driver.Capabilities {
	c.MinTTL, c.MaxTTL = c.TTLRange()
	return c
}

// String describes the Locker by its driver or its URL, with any password
// redacted.
func (lk *Locker) String() string { return "lock.Locker(" + lk.name + ")" }

// Close releases every lock the Locker holds (each Lost channel closes) and every
// lock lost by its deadline that was not released yet, makes waiting Acquire
// calls return ErrClosed, stops all background work and closes the driver. Every
// later call returns ErrClosed; calling Close again returns nil. No goroutine of
// the Locker outlives Close.
//
// The releases take at most the close timeout together (DefaultCloseTimeout,
// WithCloseTimeout, URL parameter close_timeout); what an unresponsive backend
// could not release by then expires or ends with the driver's session, which
// Close ends without waiting for the server.
func (lk *Locker) Close() error {
	lk.closeMu.Lock()
	if lk.closed {
		lk.closeMu.Unlock()
		return nil
	}
	lk.closed = true
	lk.closeMu.Unlock()
	// From here no lock is held anew and no scheduler pass begins.
	for i := range lk.shards {
		sh := &lk.shards[i]
		sh.mu.Lock()
		sh.closed = true
		sh.stop()
		sh.mu.Unlock()
	}
	drained := lk.gate.close()
	lk.interruptCalls()
	// One bound for all of Close's waiting on the backend.
	ctx, cancel := context.WithTimeout(context.Background(), lk.defaults.closeTimeout)
	defer cancel()
	stopCleanups := context.AfterFunc(ctx, lk.endCleanup)
	defer stopCleanups()
	defer lk.endCleanup()
	<-drained   // interrupted acquires clean up before the driver closes
	lk.cancel() // in-flight refreshes give up

	var held, lapsed []*Lock
	for i := range lk.shards {
		sh := &lk.shards[i]
		sh.mu.Lock()
		held = append(held, sh.schedule...) // every held lock is scheduled
		lapsed = sh.takeAllLapsedLocked(lapsed)
		sh.mu.Unlock()
	}

	var firstErr error
	release := func(l *Lock) {
		// A driver closed under the Locker has nothing left to release.
		if err := lk.d.Release(ctx, &l.req); err != nil && !isNotHeld(err) && !errors.Is(err, ErrClosed) && firstErr == nil {
			firstErr = wrapErr("close", l.req.Key, classify(err))
		}
	}
	for _, l := range held {
		if l.end(stateClosed, ErrClosed) {
			release(l)
		}
	}
	for _, l := range lapsed {
		release(l)
	}
	lk.wg.Wait()
	if err := lk.d.Close(); err != nil && firstErr == nil {
		firstErr = wrapErr("close", "", err)
	}
	return firstErr
}
