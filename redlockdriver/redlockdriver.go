// Package redlockdriver is the distlock driver for Redlock: one lock taken on a
// majority of N independent Redis (or Valkey) servers, so that it survives the
// loss of a minority of them. It is antirez's algorithm as documented on
// redis.io, with waiters woken by the servers and a Lost signal.
//
//	import _ "github.com/distlock/lock/redlockdriver"
//
//	locker, err := lock.Open(ctx, "redlock://?server=redis://:pw1@10.0.0.1:6379/0"+
//		"&server=rediss://:pw2@10.0.0.2:6380/0&server=redis://10.0.0.3:6379/0")
//
// The recipe, the proofs and the measured figures are in
// docs/backends/redlock.md; the key layout is redisdriver's
// (docs/backends/redis.md), so a server shows a lock the same way whichever
// driver took it.
//
// # The algorithm
//
// Acquire sends the same one-round-trip script (SET key owner NX PX ttl) to
// all N servers at once, each with a per-server timeout far below the TTL, and
// holds the lock when a majority (N/2+1) said yes while the validity time,
// TTL − elapsed − drift, is still positive (elapsed on the monotonic clock from
// just before the requests went out; drift is TTL × 1% + 2ms). Otherwise it
// gives back what it got on every server, including those that did not answer.
// Refresh extends the lock on every server that still holds the owner and
// succeeds on a majority within the remaining validity; release is
// owner-checked on every server. Automatic refresh is batched (one pipeline
// per server); each server spends about 1.5 µs of CPU per lock per refresh:
// see Capacity in docs/backends/redlock.md before holding very many locks.
//
// # URL format
//
//	redlock://?server=URL&server=URL&server=URL[&server=URL...][&server_timeout=DURATION]
//
// Each server parameter is a full go-redis URL of one independent server
// (redis:// or rediss://, with its own credentials, database, TLS and go-redis
// parameters), percent-encoded inside the redlock URL's query where it holds
// '&', '=', '+', '#' or '%'. At least three distinct servers are required (use
// an odd number). server_timeout (default 100ms, lowered to a tenth of short
// TTLs) bounds each server's answer; a round ends as soon as its outcome is
// decided. Unknown parameters, at either level, are errors that list the
// accepted ones. Open connects to every server and fails when fewer than a
// majority are reached (ErrNoQuorum) or any one refuses us for good (a wrong
// password, TLS); no error shows a password. Programs that have clients use
// New with one client per server.
//
// # Waiting
//
// A waiting Acquire registers its driver's inbox on the servers where it found
// the lock held; a release publishes the key on the registered inboxes, so
// waiters try again as soon as the lock is free, without polling. A split vote
// is resolved by a random back-off, as the algorithm prescribes. Waiters are
// not served in arrival order: each server orders contenders by arrival, and
// the orders need not agree.
//
// # Lost locks
//
// Lost closes when the lock may no longer be held by a majority: a refresh
// that finds too few servers holding the owner, or, sooner, the check a driver
// runs on every held lock when a server's subscription comes back after a
// crash or restart (a server votes while its key holds the owner and its
// run_id is the one that granted or last extended the lock). The cause
// (lock.Err): lock.ErrServerChanged (a majority forgot it, servers with a new
// run_id among them; ErrForgotten matches too), lock.ErrExpired or
// lock.ErrForceReleased.
//
// # Read-write locks and semaphores
//
// Shared locks are held on a majority like the mutex, with writer preference:
// a waiting writer registered on a server holds new readers back there.
// Semaphores are ErrUnsupported: counted per server and granted on a
// majority, n permits would admit more than n holders.
//
// # Sets of keys
//
// AcquireAll and TryAcquireAll of exclusive locks send each server one
// script for the whole set (driver.SetAcquirer), which takes every key there
// or none; the set is granted when a majority took it within the validity,
// else what a minority took is given back and package lock takes the keys
// one at a time. A key held, or waited for by a writer, refuses the set;
// shared sets are taken one key at a time.
//
// # Inspection, eviction and leader election
//
// The driver implements driver.Inspector, Lister, Evictor and Labeler, not
// Watcher (Observe looks every 250ms). Inspect and List report only what a
// majority of the servers hold: a minority's view is a round under way or a
// lock being given back. ForceRelease evicts on every server and leaves
// tombstones, so the evicted holder's next refresh reports
// lock.ErrForceReleased. Leader election works, with terms of 0.
//
// # Capabilities
//
//   - Fencing: no; two majorities need not agree on a counter, so Token
//     returns ErrUnsupported. Use etcd, ZooKeeper or PostgreSQL for fencing.
//   - Expiring: yes; the lock is a key with a TTL on each server.
//   - Notify: yes; releases publish to the waiting drivers' inboxes.
//   - FIFO: no; see Waiting.
//   - Shared: yes, with writer preference. Permits: no.
//   - MinTTL: 100ms, so that the per-server timeout (a tenth of the TTL at
//     most) is at least 10ms; MaxTTL: 366 days (driver.DefaultMaxTTL).
//
// # Limits
//
// Redlock's safety rests on assumptions no client can check: servers whose
// clocks do not jump forward, a restarted server kept away for the longest
// TTL (or persistence with appendfsync always), holders that do not pause and
// messages that are not delayed beyond the drift allowance. Without fencing
// nothing on the resource's side catches a holder that broke them. Locks must
// not be evicted (a noeviction maxmemory policy). docs/backends/redlock.md
// gives each assumption with its failure.
//
// # Errors
//
// With fewer than a majority answering, a call fails with an error matching
// ErrNoQuorum that names the servers and why each failed; it also matches
// driver.ErrUnavailable (package lock retries it) when the servers that
// failed for a reason that may pass could still make a majority. A round that
// finds the lock held by a majority, or a split vote, is ErrLocked.
//
// # Logging and Close
//
// The driver prints nothing; go-redis's lines and failed dials go to the
// Locker's logger (lock.WithLogger), as with redisdriver. Close of a driver
// opened from a URL returns within about a second even when servers stopped
// answering; with clients given to New, a request in flight ends at its
// per-server deadline.
package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
)

// DefaultServerTimeout bounds each server's answer when no other is given. It
// is lowered to a tenth of the lock's TTL for short TTLs.
const DefaultServerTimeout = 100 * time.Millisecond

// MinServers is the fewest servers a Driver accepts: with fewer, a majority
// tolerates no failure and Redlock gains nothing over one server.
const MinServers = 3

// minTTL is Capabilities.MinTTL: a tenth of it is the shortest per-server
// timeout.
const minTTL = 100 * time.Millisecond

var (
	// ErrNoQuorum is returned (wrapped, with each failing server's error) when
	// fewer than a majority of the servers answered.
	ErrNoQuorum = errors.New("redlockdriver: fewer than a majority of the servers answered")

	// ErrWrongType is returned (wrapped) when the lock's key holds a value that
	// is not a string on a server, so it is not a lock. It is left untouched.
	ErrWrongType = errors.New("redlockdriver: the lock's key holds a value that is not a string (not a lock); it was left untouched")
)

// Option configures a Driver made with New.
type Option func(*options)

type options struct {
	prefix  string // escaped
	timeout time.Duration
	owned   bool // Close closes the clients
}

// DefaultPrefix is the namespace of every key on each server when no prefix
// is given: redisdriver's, so that both drivers show a lock the same way.
const DefaultPrefix = redislayout.DefaultPrefix

// WithPrefix sets the namespace of every key the driver writes (DefaultPrefix
// when empty).
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix != "" {
			o.prefix = redislayout.Escape(prefix)
		}
	}
}

// WithServerTimeout sets how long a round waits for each server's answer
// (DefaultServerTimeout when zero or negative). It is lowered to a tenth of
// the lock's TTL for short TTLs.
func WithServerTimeout(t time.Duration) Option {
	return func(o *options) {
		if t > 0 {
			o.timeout = t
		}
	}
}

// withOwnedClients makes Close close the clients (for drivers made from a URL).
func withOwnedClients() Option { return func(o *options) { o.owned = true } }

// Driver locks keys on a majority of independent Redis servers. Use it through
// lock.New or lock.Open; its methods implement driver.Driver, driver.Acquirer,
// driver.BatchRefresher and driver.SetAcquirer.
type Driver struct {
	servers []*server
	quorum  int
	prefix  string // escaped
	inbox   string // this driver's pub/sub channel, the same on every server
	timeout time.Duration
	grace   time.Duration      // otherDriverGrace; tests set their own
	owned   bool               // Close closes the clients
	backs   atomic.Uint64      // subscriptions confirmed so far (a server may have come back)
	logs    redisproto.LogSink // the Locker's logger (UseLogger)

	ctx     context.Context    // cancelled by Close: ends waiting and the inbox
	cancel  context.CancelFunc //
	quit    chan struct{}      // closed by Close once no call is left: workers stop
	calls   sync.WaitGroup     // calls in flight
	workers sync.WaitGroup     // one per server
	wg      sync.WaitGroup     // inbox readers

	epoch time.Time // the origin of since

	// held is the driver's mutex, its locks granted and not yet ended, and its
	// closed gate; it guards the fields below.
	held     *kit.Book[*request, heldLock]
	groups   map[string]*group // Acquire calls waiting, by lock key
	sub      subscription
	idSets   map[string]*[]string // the interned run_id slices (see internLocked)
	lastIDs  *[]string            // the one interned last
	phase    uint8                // the last heldLock.phase given
	checking checkState
	// undecided keeps what a Release that ended without an outcome learned,
	// for the retry of that Release.
	undecided map[*request]*releaseTally
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
	_ driver.LoggerUser     = (*Driver)(nil)
)

// New returns a Driver that locks on the servers behind clients, one client
// per independent server (at least MinServers, none of them the same server).
// The caller keeps the clients and closes them after the Driver. A client
// should honour context deadlines (redis.Options.ContextTimeoutEnabled).
func New(clients []redis.UniversalClient, opts ...Option) (*Driver, error) {
	if len(clients) < MinServers {
		return nil, fmt.Errorf("redlockdriver: %d servers given, Redlock needs at least %d (use redisdriver for one server)", len(clients), MinServers)
	}
	seen := map[string]int{}
	servers := make([]*server, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("redlockdriver: client %d is nil", i+1)
		}
		if _, ok := c.(*redis.Ring); ok {
			return nil, fmt.Errorf("%w: redlockdriver: client %d is a *redis.Ring, whose shards are not independent voters", driver.ErrUnsupported, i+1)
		}
		name := clientName(c, i)
		if j, dup := seen[name]; dup && name != "" {
			return nil, fmt.Errorf("redlockdriver: clients %d and %d are the same server %s; Redlock needs independent servers", j+1, i+1, name)
		}
		seen[name] = i
		servers[i] = &server{idx: i, client: c, name: name, queue: newQueue()}
	}
	d := &Driver{
		servers: servers,
		quorum:  len(servers)/2 + 1,
		grace:   otherDriverGrace,
		quit:    make(chan struct{}),
		groups:  map[string]*group{},
		held:    kit.NewBook[*request, heldLock](),
		idSets:  map[string]*[]string{},
		epoch:   time.Now(),

		undecided: map[*request]*releaseTally{},
	}
	o := options{prefix: DefaultPrefix, timeout: DefaultServerTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	d.prefix, d.timeout, d.owned = o.prefix, o.timeout, o.owned
	for _, s := range servers {
		// Each server's dials are counted (see identities); for owned
		// clients Close also ends go-redis's dials in flight (see
		// redisproto.DialWatch).
		s.dials = redisproto.NewDialWatch(d.owned, &d.logs)
		s.client.AddHook(s.dials)
		s.identify = identifiable(s.client)
	}
	d.inbox = redislayout.NewInbox(d.prefix)
	d.sub.conns = make([]*redis.PubSub, len(servers))
	d.sub.up = make([]bool, len(servers))
	d.ctx, d.cancel = context.WithCancel(redisproto.WithLogSink(context.Background(), &d.logs))
	d.workers.Add(len(servers))
	for _, s := range servers {
		go d.work(s)
	}
	return d, nil
}

// clientName is a client's address and database, for errors and for spotting
// a server given twice; never a password.
func clientName(c redis.UniversalClient, i int) string {
	if rc, ok := c.(*redis.Client); ok {
		o := rc.Options()
		return fmt.Sprintf("%s/%d", o.Addr, o.DB)
	}
	return fmt.Sprintf("client %d", i+1)
}

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Expiring: true, Notify: true, Shared: true, WriterPreference: true, MinTTL: minTTL, MaxTTL: min(redislayout.MaxTTL, driver.DefaultMaxTTL)}
}

// begin registers a call, or returns ErrClosed after Close, or ctx's error.
// Close waits for registered calls before it stops the workers.
func (d *Driver) begin(ctx context.Context) error {
	d.held.Lock()
	defer d.held.Unlock()
	if err := d.held.OpenLocked(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.calls.Add(1)
	return nil
}

// Close ends waiting Acquire calls (they give back what they took and return
// driver.ErrClosed), stops the workers and the inbox, and, for a driver opened
// from a URL, closes its clients. Locks still held stay until their TTL ends.
// A driver opened from a URL closes within about a second even when servers
// stopped answering: requests still in flight after closeGrace are cut off
// by closing the clients. With clients given to New, which Close does not
// close, a request in flight ends at its deadline (the per-server timeout,
// or ten of them for Open's check).
func (d *Driver) Close() error { return d.close(closeGrace) }

// closeGrace is how long Close lets requests in flight finish before it cuts
// them off, for a driver that owns its clients.
const closeGrace = time.Second

// close is Close, which waits at most grace for the requests in flight of
// a driver that owns its clients.
func (d *Driver) close(grace time.Duration) error {
	d.held.Lock()
	_, first := d.held.CloseLocked() // the locks stay on the servers until their TTL
	d.held.Unlock()
	if !first {
		return nil
	}
	d.cancel() // interrupts waiting Acquire calls and the inbox readers
	stopped := make(chan struct{})
	go func() {
		d.calls.Wait() // they clean up through the workers
		close(d.quit)
		d.workers.Wait()
		d.closeInbox()
		d.wg.Wait()
		close(stopped)
	}()
	var errs []error
	closeClients := func() {
		for _, s := range d.servers {
			errs = append(errs, s.client.Close())
		}
	}
	if d.owned {
		t := time.NewTimer(grace)
		select {
		case <-stopped:
			t.Stop()
			closeClients()
		case <-t.C:
			// Closing the clients closes their connections: every request
			// in flight ends at once.
			closeClients()
			<-stopped
		}
		for _, s := range d.servers {
			s.dials.Close()
		}
		return errors.Join(errs...)
	}
	<-stopped
	for _, s := range d.servers {
		s.dials.Close() // counts only: cancels nothing of the program's clients
	}
	return nil
}

// timeoutFor is the per-server timeout of a round for a lock with this TTL.
func (d *Driver) timeoutFor(ttl time.Duration) time.Duration {
	return min(d.timeout, max(ttl/10, time.Millisecond))
}

// deadline is when a round started at start stops waiting for servers.
func (d *Driver) deadline(ctx context.Context, start time.Time, ttl time.Duration) time.Time {
	dl := start.Add(d.timeoutFor(ttl))
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	return dl
}

var millis = redisproto.Millis

// UseLogger implements driver.LoggerUser: see Logging and Close in the
// package documentation.
func (d *Driver) UseLogger(l *slog.Logger) { d.logs.Set(l) }
