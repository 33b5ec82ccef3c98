// Package etcddriver is the distlock driver for etcd v3: locks are keys written
// with a lease, ordered by their create revision, in the layout of etcd's own
// concurrency.Mutex and etcdctl lock, so that those and this driver exclude each
// other.
//
//	import _ "github.com/distlock/lock/etcddriver"
//
//	locker, err := lock.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp")
//
// Users who already have a *clientv3.Client build the driver from it with New and
// pass it to lock.New.
//
// # URL format
//
//	etcd://host:2379/prefix                       one member, plain text
//	etcd://host1:2379,host2:2379,host3:2379/myapp  several members of one cluster
//	etcd://user:password@host:2379/myapp           etcd authentication
//	etcds://host:2379/myapp                        TLS, server verified with the system roots
//	etcds://host:2379/myapp?cacert=/etc/etcd/ca.pem&cert=/etc/etcd/client.pem&key=/etc/etcd/client-key.pem
//	etcd://host:2379/myapp?dial_timeout=3s&keepalive_time=30s&keepalive_timeout=10s
//
// A host without a port gets 2379. The path is the key prefix (DefaultPrefix,
// /distlock, when empty); the portable prefix parameter may name it instead
// (prefix=myapp means /myapp), but not both. The driver's own parameters are those
// of etcdctl's flags of the same names: cacert (file of CA certificates to verify
// the server with), cert and key (files of a client certificate and its key, both
// or neither), server_name (the name to verify the server's certificate for), all
// four only with etcds://; dial_timeout (default 5s; Open fails if etcd does not
// answer within it, and at once, naming the refusal, when every endpoint
// refuses the connection), keepalive_time and keepalive_timeout (the gRPC connection's
// pings: defaults 10s and 5s; gRPC raises a keepalive_time below 10s to 10s).
// Any other parameter is an error that lists these; the portable ttl,
// auto_refresh and prefix are described in package lock. A list of several IPv6
// literal hosts cannot be written in a URL; use names.
//
// Open honours its context in every step (connecting, authenticating, checking
// access, measuring the minimum lease TTL), and dial_timeout bounds them too. It
// verifies access before it returns: etcd with authentication on and a URL
// without credentials, a wrong user or password, or a user who may not read and
// write every key under the prefix fail Open with an error that says which, never
// with the password in it; they are not left to fail the first Acquire. (The
// check is one transaction that writes nothing; it needs read and write
// permission on the prefix's whole range, so a user limited to part of it is
// refused even though some of its locks would work.)
//
// # Key layout
//
// The lock on key k is held by the key, among
//
//	<prefix>/<escaped k>/<lease ID in hex>
//
// with the lowest create revision; its value is the holder's label and owner ID
// (see Inspection, eviction and leader election). (That is
// the exclusive lock; shared holds and semaphores queue in the same range, see
// Read-write locks and semaphores.) The
// escaping keeps ASCII letters, digits, - . _ ~ : @ and non-ASCII UTF-8 as they
// are and writes every other byte as %XX, so distinct keys are distinct locks and
// no key reaches outside its prefix or into another key's range ("a/b", "a_b" and
// "../a" are three locks). Driver.LockPrefix gives <prefix>/<escaped k>: the name
// that `etcdctl lock` and concurrency.NewMutex take for the same lock, so
//
//	etcdctl lock /distlock/invoice:42 ./run-by-hand.sh
//
// waits for, and then excludes, lock.Acquire(ctx, "invoice:42") on /distlock.
//
// etcd's tools name a key by its lease alone, so with one shared session
// concurrency.Mutex lets several goroutines "hold" the same lock at once. Here the
// first request of a lease on a key gets exactly that name, and further requests
// of the same lease on the same key while it is there get <lease hex>_<n>: a
// contender of its own in the same range, which etcd's tools count like any other.
// So goroutines of one process exclude each other, and every request queues in
// etcd, in arrival order.
//
// Each waiter watches only the key just before its own, so a release wakes one
// waiter, not the queue. The watch starts at the current revision, not an old one:
// etcd delivers a watch that starts in the past only every 100ms, which caps a
// contended concurrency.Mutex near 80 handoffs a second. (etcd 3.4 may still file
// a watch started under write load as behind; for its first quarter second the
// waiter also reads its predecessor on a doubling schedule from 4ms, which bounds
// that delay.) The waiter confirms, in the read that makes it the holder, that its
// key still exists with its lease: one whose lease ended while it waited is never
// told it holds (etcd issue #11456, the Jepsen finding).
//
// # Read-write locks and semaphores
//
// Shared holds (lock.WithShared) and permits of a semaphore of n
// (lock.WithPermits(n), n >= 2) queue in the same range as the mutex, one key
// per request ordered by create revision, with the shape in the key's name:
//
//	<prefix>/<escaped k>/<lease hex>[_<n>]           exclusive (unchanged)
//	<prefix>/<escaped k>/read/<lease hex>[_<n>]      shared
//	<prefix>/<escaped k>/sem/<n>/<lease hex>[_<n>]   one permit of a semaphore of n
//
// Any other name in the range (concurrency.Mutex's and etcdctl lock's lease
// names, anything written by others) counts as an exclusive request. The
// queueing rule: a request is admitted when, among the keys created before its
// own,
//
//   - exclusive: there is none (the mutex's rule, unchanged);
//   - shared: there is no exclusive one, holding or waiting;
//   - a permit of n: there are fewer than n (holders, or permit requests
//     waiting ahead of it).
//
// TryAcquire is the same rule applied at once to a request that arrives behind
// every queued one: it never passes a waiter. So once an exclusive request
// waits, shared requests that arrive after it wait behind it, and those that
// arrived before it keep their turn and hold together with the current
// readers: a stream of overlapping readers delays a writer by the readers ahead
// of it only (WriterIsNotStarvedByAStreamOfReaders, readers of 20ms arriving
// every 4ms, on a loaded two-core machine under the race detector: the
// writer's worst wait per run had a median of about 120ms over 25 runs, 39ms
// at best, no longer under 3s streams than under 1s ones; in bursts of load
// from other processes, when the writer got the key only about 5 times a
// second, up to 0.56s, and in one run 0.9s. The writer watches the last reader
// before it, then reads again, and watches any earlier one still there; most
// of its wait is the readers ahead of it, piled up behind the previous writer,
// each being told of its turn by its own watch and read). A semaphore admits
// in arrival order whichever holder leaves first.
//
// A concurrency.Mutex or etcdctl lock on the same name waits for every key
// before its own, readers and permits included, and every reader waits for
// its key: they exclude each other (TestReadersAndConcurrencyMutexExcludeEachOther).
// etcd's recipe.RWMutex (client/v3/experimental/recipes) names its readers
// read/<nanoseconds> and its writers write/<nanoseconds> in the same range:
// its readers hold together with ours and its writers exclude ours and are
// excluded by them (TestRecipeRWMutexReadersShareAndItsWritersExclude), but
// its readers wait only for keys under write/, so they pass this driver's and
// concurrency.Mutex's writers: do not mix recipe.RWMutex readers with
// exclusive locks of this driver.
//
// A shared request is written and checked in one transaction (TryAcquire:
// written only if no exclusive key is there), and waits, as the mutex does,
// on a watch of the last exclusive key before its own (one range read of the
// two ranges beside read/ finds it). A permit request writes its key and reads
// the names of the keys before it in one transaction (TryAcquire deletes it
// again when n or more are there: etcd cannot compare a count); a permit
// waiter watches the lock's range, counts the deletes of keys older than its
// own (from their previous value), and reads again only once enough are gone.
// The confirmation that makes a waiter a holder is the mutex's: a read that
// also checks our key still exists with our lease.
//
// A key is a read-write lock or a semaphore of one n. A permit request that
// finds, among the keys before it, one that is not a permit of the same n (a
// reader, a writer, a semaphore of another n), a shared request whose last
// exclusive key before it is a permit, and an exclusive request whose
// predecessor (the key just before it; in TryAcquire, the first key) is a
// permit, fail with driver.ErrInvalidArgument and leave no key behind
// (TestMismatchedShapesAreInvalidArgument). Every request reads what is before
// it in the transaction that writes its key, and again at each wake-up, so of
// two requests of mismatched shapes the later one is refused, whichever was
// admitted first (a writer sees a permit once the keys between them are gone,
// which they are, each refused in turn). Only keys of other clients are never
// refused: a concurrency.Mutex queued behind permits waits for all of them,
// which is safe, and permit requests after it are refused.
//
// Tokens: every grant's token is the create revision of its key, as for the
// mutex. A request is admitted only once the keys before it that it cannot
// hold beside are gone, so tokens increase in the order of admission: a
// writer's token exceeds those of every reader and permit holder before it,
// a reader's those of every writer before it. Holds admitted by the same
// release (readers behind one writer, say) have tokens in queue order, but
// each learns of its grant by its own read, so they may return from Acquire
// in another order.
//
// # Inspection, eviction and leader election
//
// The Driver implements driver.Inspector, driver.Lister, driver.Evictor,
// driver.Labeler and driver.Watcher, so lock.Inspect, List, ForceRelease,
// Campaign (an exclusive lock on the election's name, in the layout above),
// Leader, Observe and Proclaim all work on etcd.
//
// Layout. A request's key holds the label the portable layer gives it (a small
// JSON object: owner name, when it asked, a leader's value), a newline, and
// its owner ID:
//
//	/distlock/invoice:42/694d8a1b2c3d4e5f
//	{"owner":"web-3:4121","since":1764072000123}
//	9f0c2e7d1a4b5c6d7e8f9a0b1c2d3e4f
//
// so `etcdctl get --prefix /distlock/invoice:42/` shows who holds and who
// waits. The owner stays last, where an acquisition's retry and cleanup
// recognise their own key; concurrency.Mutex and etcdctl lock ignore values,
// so the interop is unchanged. A key this driver did not write (its value has
// no newline) is shown with its value as its label, or its name (a
// concurrency.Mutex's lease in hex) when the value is empty.
//
// Inspect reads the lock's range once and applies the queueing rule (see
// Read-write locks and semaphores): the first key holds, or the readers before
// the first key that is not a reader, or the first n permits of a semaphore of
// n; every other key waits. Holders, their tokens (create revisions), labels,
// Permits and Waiters are exact as of that read. Since is zero: etcd records no
// time, and the portable layer reads the time in the holder's label. Expires
// is the holder's lease's expiry, from one TimeToLive request per distinct
// lease among the holders (whole seconds, as etcd reports them): the lease is
// renewed by keepalives, so this is when etcd would drop the hold if its
// process stopped now. Info.Token is the largest holder's token, zero when the
// key is free (etcd keeps no record of a deleted key's revision).
//
// List reads the prefix's range, keys only, in pages of 1000, and reports
// every lock whose range has a key in it (its first key holds by the queueing
// rule), with the user key read back from its escaped name.
//
// ForceRelease reads the holders as Inspect does and, in one transaction that
// compares each holder's create revision (so it evicts nobody who arrived since
// the read), deletes their keys and writes a tombstone for each,
//
//	<prefix>/!forced/<escaped key>/<key name>@<create revision>
//
// on a lease of its own of twice the longest holder's lease TTL (at least 10s;
// a minute for a key without a lease), so tombstones clean themselves up. "!"
// never occurs in an escaped key, so no lock's range contains a tombstone:
// neither this driver nor concurrency.Mutex waits for one. The evicted
// holder's driver learns of the eviction at its next refresh (within a third of
// the TTL with automatic refresh): the refresh finds its key gone, reads the
// tombstone, and reports driver.ErrNotHeld wrapping driver.ErrForceReleased
// (lock.ErrForceReleased in Err). A holder whose tombstone expired first, or
// whose read of it failed, reports an ordinary loss. The holders' leases are
// not revoked (they carry their other locks); waiters keep their places, so the
// next grant is to a key created after the evicted ones, with a larger token;
// the evicted holder's Release deletes a name that nobody else writes (see
// Why release needs no compare) and frees nothing. More than 64 holders are evicted in several transactions (etcd's
// --max-txn-ops), the first of which checks the holders read; a foreign
// holder (concurrency.Mutex) is evicted the same way, and its owner is not
// told.
//
// etcd's concurrency.Election on Driver.LockPrefix(name) campaigns in the same
// range, by the same rule (the lowest create revision leads), as
// lock.Campaign(name): the two exclude each other, lock.Leader shows an
// Election's leader with its value as the owner name and its create revision
// as the term, and Election.Leader shows ours with our label and owner as its
// value (TestCampaignAndConcurrencyElectionShareOneLeadership).
//
// Relabel (Proclaim, and Campaign's publishing of the moment it won) puts the
// new label on the holder's key in a transaction on its create revision and
// lease: the token stays, and a key that is gone is never recreated. Waiters
// of this driver react to deletes only, so a relabelling wakes none of them.
//
// Watch is an etcd watch of the lock's range: every request, relabelling,
// release, expiry and eviction signals, so Observe reports a new leader within
// a round trip (ObserveSeesEveryChangeInOrder: a few milliseconds here). When
// etcd ends the watch (a compaction) it signals and watches again. Each Watch
// (each Observe) costs an etcd watch and a goroutine until its context ends or
// the Driver closes.
//
// # Fenced writes
//
// When the resource the lock guards is etcd itself, Fenced refuses the writes
// of a superseded holder in the same transaction as the write, in either of
// two ways:
//
//   - Fenced.Txn, Put and Delete compare the writer's token with the largest
//     admitted before for the resource, stored in TokenKey(resource)
//     (TokenKeyPrefix + resource, apart from the values so that a range
//     delete leaves it), and admit an equal or larger one: etcd's
//     clientv3.Compare on the stored value, in fixed-width decimal. Tokens
//     from any backend work.
//   - Fenced.TxnIfHeld compares the lock's own key, as
//     concurrency.Mutex.IsOwner does: the key with create revision token (the
//     token of this driver) must still exist. It refuses a holder whose lease
//     expired or was revoked even before a successor wrote, and needs no
//     token key; it takes the lock's name, Driver.LockPrefix(key) or
//     LockPrefix(prefix, key).
//
// Refusals match fence.ErrStale; token 0 matches fence.ErrZeroToken.
//
//	err := etcddriver.Fenced{KV: client}.Put(ctx, "/invoices/42", "paid", l.Token())
//	if errors.Is(err, fence.ErrStale) {
//		// a newer holder has written: this one lost the lock while paused
//	}
//
// # Leases and TTL
//
// A Driver keeps one lease per distinct lease TTL alive for every 1,000 of its
// locks, with one goroutine each (with the Locker's default TTL and fewer than
// 1,000 locks that is one lease for all of them); it grants a lease on first
// use and revokes it once it served no lock for a whole TTL. (etcd applies a
// put with a lease in time linear in the keys already on it, etcd issue
// #15993, so one lease for 100,000 locks made every acquisition cost etcd
// about a millisecond.) The lease TTL is the lock TTL rounded up to whole seconds: the
// time after which etcd drops the locks of a process that stopped. Each held lock
// also expires on its own: a lock not refreshed within its TTL is deleted by the
// driver (with automatic refresh off, that is its lifetime), and a process that
// stops keeping its lease alive loses its locks at the lease's expiry.
//
// etcd grants no lease shorter than its minimum, 1.5 election timeouts rounded up
// to whole seconds (2s with the default --election-timeout=1000), and raises a
// shorter one without saying so. New measures it by asking for a one-second lease
// and reading what etcd granted, and declares it as Capabilities.MinTTL, so a
// shorter TTL is refused with an error rather than silently lengthened. Nor does
// etcd grant a lease longer than 9,000,000,000 seconds (its MaxLeaseTTL, about
// 285 years); package lock accepts at most 366 days, which is
// Capabilities.MaxTTL. The driver refuses a TTL outside that range itself, with a plain
// error that names the range, before etcd sees it, and no conversion between a
// Duration and seconds can overflow, whatever TTL it is given.
//
// # Capabilities
//
//   - Fencing: yes; the token is the create revision of the holder's key, which
//     only grows, cluster-wide, across expiry, client restarts and server
//     restarts (etcd keeps its revision). Writes to etcd itself are fenced
//     by Fenced (see Fenced writes).
//   - Expiring: yes; a lock lives for its TTL unless refreshed (see above).
//   - Notify: yes; a waiter watches its predecessor's key and is woken by its
//     delete.
//   - FIFO: yes; waiters are served in the order their keys were created,
//     which is the order their Acquire calls reached etcd, within one process as
//     across processes.
//   - Shared and WriterPreference: yes; see Read-write locks and semaphores.
//   - Permits: yes; a mismatched n, or a semaphore used as a lock, is
//     ErrInvalidArgument where the request can see it (see Read-write locks
//     and semaphores).
//   - MinTTL: the server's minimum lease TTL, measured by New (or given by
//     WithMinTTL), and at least 10ms (driver.FloorTTL).
//   - MaxTTL: 366 days (driver.DefaultMaxTTL), package lock's longest TTL;
//     etcd's own maximum lease TTL, 9,000,000,000s, is longer.
//
// # Lost locks
//
// A lock's Lost channel closes when etcd says its lease is gone (expired, or
// revoked by an operator: etcdctl lease revoke), when no keepalive of the lease
// was confirmed within its TTL (counted from the moment the last confirmed one
// was sent, less a drift allowance, so before etcd can expire it), when a refresh
// finds its key deleted or replaced (only that lock), and when the Driver closes.
// After a lease is lost, new acquisitions get a new lease. A leader change does
// not lose locks when the TTL outlasts the election: etcd extends leases across
// elections, and the driver retries keepalives until the lease's deadline.
//
// When the client's connection comes back after it broke (the server restarted,
// the network healed), the driver sends every lease a keepalive at once. A server
// that came back without its data answers that the lease is gone, and Lost closes
// then, within a round trip of reconnecting, not at the next scheduled keepalive
// or refresh a third of the TTL later. A client the driver opened from a URL
// retries connecting after 100ms, then 1.6 times longer each time up to 1s, so
// it reconnects within about a second of the server's return; with New the
// client's own backoff
// applies (gRPC's default starts at 1s and grows to 2 minutes), and so does the
// delay. A server that restarted with its data keeps the lease (etcd renews
// leases on restart), and nothing is lost. When the server freezes or cannot be
// reached, Lost closes at the lease's deadline, a TTL less the drift allowance
// after the last confirmed keepalive was sent, so before etcd can expire the
// lease and hand the lock on.
//
// The validity a grant or a refresh gives (what the portable layer counts,
// and what a holder that pauses relies on) ends by that same deadline: a
// grant's Start is moved back to the lease's last renewal when that was
// earlier, and a refresh renews the lease first when its deadline would fall
// short of the refresh's validity. A put or a read alone does not renew a
// lease, so counting from them would promise up to a third of a TTL more than
// etcd keeps the key (TestGrantAndRefreshValidityEndByTheLeasesDeadline).
//
// The cause of a loss (lock.Err and Do's context.Cause match it):
//
//   - lock.ErrSessionExpired: etcd says the lease is gone (expired, revoked,
//     or lost with a server that came back without its data);
//   - lock.ErrExpired: no keepalive was confirmed within the lease's TTL, the
//     lock's own TTL passed unrefreshed, or its key was deleted;
//   - lock.ErrTakenOver: a refresh found another lock's key in its place;
//   - lock.ErrForceReleased: ForceRelease deleted it.
//
// # Why release needs no compare
//
// Release is a plain Delete of the request's key, as concurrency.Mutex's
// Unlock is (on etcd 3.4 a transaction with a compare copies the backend's
// read buffer, and costs more than the Delete). It can only ever delete this
// request's own key, because nobody else can write or recreate that exact
// name while the driver knows the request:
//
//   - other processes and other Lockers: the name ends in the hex of a lease
//     this Driver was granted, and etcd never grants one lease ID twice; a
//     Driver never shares its leases with another (Leases exposes them for
//     revoking only; a concurrency session built on one would already break
//     exclusion, as two sessions of one lease do);
//   - other requests of the same lease on the same key: the driver gives each
//     live request its own name (<lease hex>_<n>), and frees a name only once
//     its request is forgotten;
//   - ForceRelease (here or elsewhere) and a manual delete only delete; they
//     never write a key in a lock's range;
//   - the same request's retries (of Acquire after a lost reply) write the
//     same key for the same request, which is still ours;
//   - a delete whose reply was lost or that timed out may still be applied
//     later (a retry, or a duplicate delayed in a partitioned member): that
//     is the one case in which a name could be recreated under it, by a newer
//     request of the same lease given the freed name, and deleted by the late
//     duplicate (etcd issue #22082, which concurrency.Mutex has:
//     TestConcurrencyMutexRetriedUnlockDeletesNewerLock). So after such a
//     failure the name stays reserved until the lease ends
//     (TestRetriedReleaseKeepsNewerLockOfSameLease).
//
// The deletes that the driver makes in the background (an acquisition
// abandoned by its caller, a lock whose TTL passed without a refresh, retries
// of those) keep the compare on the key's create revision, or its value while
// that is unknown: they run after the request is forgotten and its name may
// already be given to another.
//
// # Errors
//
// Each call makes one attempt and reports. Against an etcd that accepts
// connections and answers nothing (frozen, stalled), a TryAcquire whose
// context has no deadline fails with driver.ErrUnavailable once gRPC's
// keepalive declares the connection dead: after keepalive_time plus
// keepalive_timeout (15s by default). A failure that a later attempt may
// not meet matches driver.ErrUnavailable (lock.ErrUnavailable), which the
// portable layer retries: gRPC's Unavailable and DeadlineExceeded (connection
// refused, reset or lost, keepalive timeouts), etcd's "no leader", "leader
// changed", "request timed out", "too many requests", and a lease or queue place
// that ended under a call. Everything else is permanent and fails the call at
// once: authentication and permission errors, invalid arguments, a full database.
// The caller's own cancellation or deadline is returned as it is, and a call that
// Close interrupted returns ErrClosed. Requests carry etcd's require-leader mark:
// a member without a leader refuses them at once with "no leader" instead of
// holding them for its request timeout (7s by default), or, for reads the etcd
// client retries, until the context ends. (The etcd client itself still retries
// a read that failed as unavailable, for up to about 2.5s, within the call's
// context.)
//
// # Logging
//
// The driver prints nothing. The etcd client it opens from a URL logs through
// a zap logger of the driver's (no module beyond the client's zap), which
// drops every line until a Locker gives the driver a logger (lock.WithLogger;
// the driver implements driver.LoggerUser) and then passes the lines there,
// with their fields and the attribute client=etcd: the client's errors at
// Warn, its warnings about the connection (a failing lease keepalive loop) at
// Info, and its retries of a request, which come once per operation while a
// server is away, at Debug (the Locker warns once that the backend is
// unreachable). A client given to New keeps the program's logger. gRPC's own
// process-wide logger is left as the program set it.
//
// # Limits
//
// Close waits for the revokes of its leases for at most half a second: against a
// server that does not answer it returns then, and its locks stay until their
// lease expires, a TTL after the last keepalive. A holder on the minority side
// of a network partition learns of the loss at its lease's deadline, as when the
// server freezes. Each held lock costs one key and no goroutine; each waiting Acquire a key and a
// watch. Prefixes must not nest (see WithPrefix). On a cluster, keep the TTL well
// above the time an election takes (several seconds; the tests use 5s with etcd's
// default 1s election timeout): while there is no leader no keepalive is
// confirmed, and a lease whose deadline passes meanwhile is given up. An
// operator's revoke or delete that races a handoff within a member's replication
// lag can escape the new holder's check (see check in the source); its next
// refresh reports it. Keys written by others under a
// lock's range count as contenders, as they do for concurrency.Mutex (as
// exclusive ones, whatever their name, unless it starts with read/ or
// sem/<n>/). A permit waiter reads the names of all the keys before it when it
// is admitted or woken (not at every release), and watches the whole range:
// a semaphore with a long queue costs a read of that queue per admission.
// Automatic refresh confirms the locks due together with keys-only range reads
// over their sorted keys (pages of 1,024 keys, up to 16 reads at once) and one
// lease keepalive per lease: cheap when the range holds mostly this driver's
// keys. Where other keys (other clients' locks, waiters) fill the range, or
// the batch is a small part of the driver's locks, it reads its own keys one
// by one instead, in transactions bounded by etcd's --max-txn-ops (default
// 128).
//
// Many locks. A Driver holding 1,024 locks or more also watches its prefix
// (one watch, and one goroutine, per Driver), and refreshes the locks it
// covers without reading their keys: a refresh round writes one empty key,
// <prefix>/!refresh/<lease hex>, on the lease ("!" keeps it out of every
// lock's range, and List skips it), shared by the refreshes under way, and
// waits for the watch to deliver that write; every event before it has been
// delivered by then, so a delete or overwrite of a covered key is seen by the
// next round, as a read would see it (see RefreshBatch). A lock's first
// refresh after the watch (re)started reads its key, and a round whose write
// is not delivered within half the time its refresh has left reads its keys
// instead. The watch delivers every event under the prefix to the Driver
// (other clients' acquisitions and releases too). Measured with 100,000 locks
// held by one Driver (TTL 3s, scripts/bench's scale scenario, etcd 3.4): 100
// leases, 316 requests a second to etcd (keepalives and rounds), none lost.
package etcddriver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// DefaultPrefix is the key prefix when none is given: locks live under
// /distlock/.
const DefaultPrefix = "/distlock"

// Option configures a Driver made with New.
type Option func(*options)

type options struct {
	prefix string
	minTTL time.Duration
}

// WithPrefix sets the etcd key prefix every lock lives under (trailing slashes are
// dropped; empty means DefaultPrefix). Two drivers exclude each other only if
// they use the same prefix, and one prefix must not lie inside another's locks:
// with prefixes /a and /a/b, the lock "b" of the first would contain the locks of
// the second.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithMinTTL declares the server's minimum lease TTL instead of measuring it.
// New normally asks etcd for a one-second lease and reads the TTL it grants
// (etcd raises short TTLs to a minimum derived from its election timeout: 2s with
// the defaults). A wrong value does no harm beyond an error: if etcd later grants
// a longer lease than asked, the acquisition fails with ErrUnsupported.
func WithMinTTL(d time.Duration) Option { return func(o *options) { o.minTTL = d } }

// Driver takes locks in etcd. Use it through lock.New or lock.Open; its methods
// implement driver.Driver, driver.Acquirer and driver.BatchRefresher, and the
// inspection and operator interfaces (see Inspection, eviction and leader
// election).
type Driver struct {
	c      *clientv3.Client
	owned  bool // Close closes c
	prefix string
	minTTL time.Duration

	ctx          context.Context // cancelled by Close: ends keepalives, background deletes, watchConnection
	cancel       context.CancelFunc
	revokeCtx    context.Context // cancelled by Close once its own revokes are done: ends background revokes
	revokeCancel context.CancelFunc
	closeClient  func()        // releases what open made for the client it owns; nil for New
	logs         *kit.LogSink  // the client's zap logger passes its lines here (logging.go); nil for New
	done         chan struct{} // closed by Close: ends waiting Acquire calls
	wg           sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	leases  map[leaseSlot]*session // the live sessions, by lease TTL in seconds and place
	entries map[string]*entry      // by user key, chained through entry.next
	epoch   time.Time              // entries keep their times as offsets from it
	rw      *refreshWatch          // the prefix watch that confirms refreshes of many locks; nil until started
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
)

// probeTimeout bounds New's checks of the server: access to the prefix and the
// minimum lease TTL.
const probeTimeout = 10 * time.Second

// Limits of etcd's lease TTL (its lease.MaxLeaseTTL, about 285 years), in
// etcd's unit and as a Duration; the latter fits: 9e18 ns < 2^63 ns.
const (
	maxLeaseSeconds = clientv3.MaxLeaseTTL
	maxLeaseTTL     = time.Duration(maxLeaseSeconds) * time.Second
)

// New returns a Driver that locks with the client c, which stays the caller's:
// Close does not close it. New needs the server to answer: it checks that the
// client may read and write under the prefix (so missing or wrong credentials
// fail here, not at the first acquire) and, unless WithMinTTL is given, asks etcd
// for the minimum lease TTL it grants. It waits for at most 10 seconds, or until
// the client's context ends.
func New(c *clientv3.Client, opts ...Option) (*Driver, error) {
	ctx, cancel := context.WithTimeout(c.Ctx(), probeTimeout)
	defer cancel()
	d, err := newDriver(ctx, c, false, opts)
	if err != nil && transient(err) {
		err = fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return d, err
}

func newDriver(ctx context.Context, c *clientv3.Client, owned bool, opts []Option) (*Driver, error) {
	if c == nil {
		return nil, fmt.Errorf("etcddriver: nil client")
	}
	var cfg options
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.minTTL < 0 {
		return nil, fmt.Errorf("etcddriver: negative minimum TTL %v", cfg.minTTL)
	}
	prefix := normalizePrefix(cfg.prefix)
	ctx = requireLeader(ctx)
	if err := verifyAccess(ctx, c, prefix); err != nil {
		return nil, err
	}
	if cfg.minTTL == 0 {
		m, err := measureMinTTL(ctx, c)
		if err != nil {
			return nil, err
		}
		cfg.minTTL = m
	}
	d := &Driver{
		c:       c,
		owned:   owned,
		prefix:  prefix,
		minTTL:  cfg.minTTL,
		done:    make(chan struct{}),
		leases:  map[leaseSlot]*session{},
		entries: map[string]*entry{},
		epoch:   time.Now(),
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.revokeCtx, d.revokeCancel = context.WithCancel(context.Background())
	if cc := c.ActiveConnection(); cc != nil {
		d.wg.Add(1)
		go d.watchConnection(cc)
	}
	return d, nil
}

// verifyAccess checks, in one transaction that changes nothing, that the client
// may read the prefix's whole range and write in it, as locking needs: etcd
// checks the permissions of both branches of a transaction, and the branch
// with the put is never taken (no create revision is negative). Being a write,
// it also shows that the cluster has a quorum.
func verifyAccess(ctx context.Context, c *clientv3.Client, prefix string) error {
	probe := prefix + "/"
	_, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(probe), "<", 0)).
		Then(clientv3.OpPut(probe, "")).
		Else(clientv3.OpGet(probe, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())).
		Commit()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcddriver: etcd requires authentication: give a user and password (%s://user:password@host/prefix): %w", Scheme, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcddriver: user %q may not read and write the keys under %q: %w", c.Username, prefix, err)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrUserNotFound):
		return fmt.Errorf("etcddriver: authentication as user %q failed: %w", c.Username, err)
	}
	return fmt.Errorf("etcddriver: checking access to the keys under %q: %w", prefix, err)
}

// measureMinTTL asks for a one-second lease and reads back what etcd granted:
// etcd raises a TTL below its minimum (1.5 election timeouts, rounded up to whole
// seconds) without saying so, and a lock that lives longer than its holder thinks
// delays everyone else after a crash.
func measureMinTTL(ctx context.Context, c *clientv3.Client) (time.Duration, error) {
	g, err := c.Grant(ctx, 1)
	if err != nil {
		return 0, fmt.Errorf("etcddriver: measuring the server's minimum lease TTL: %w", err)
	}
	granted := g.TTL
	ttl, err := c.TimeToLive(ctx, g.ID)
	if err == nil && ttl.GrantedTTL > granted {
		granted = ttl.GrantedTTL
	}
	_, rerr := c.Revoke(ctx, g.ID)
	if err != nil {
		return 0, fmt.Errorf("etcddriver: measuring the server's minimum lease TTL: %w", err)
	}
	if rerr != nil {
		return 0, fmt.Errorf("etcddriver: revoking the probe lease: %w", rerr)
	}
	if granted < 1 || granted > maxLeaseSeconds {
		return 0, fmt.Errorf("etcddriver: etcd granted a lease of %ds for 1s", granted)
	}
	return time.Duration(granted) * time.Second, nil
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fencing:          true,
		Expiring:         true,
		Notify:           true,
		FIFO:             true,
		Shared:           true,
		WriterPreference: true,
		Permits:          true,
		MinTTL:           max(d.minTTL, driver.FloorTTL),
		MaxTTL:           min(maxLeaseTTL, driver.DefaultMaxTTL),
	}
}

// Prefix returns the etcd key prefix the driver's locks live under.
func (d *Driver) Prefix() string { return d.prefix }

// LockPrefix returns the name that etcd's own tools take for the lock on key:
// `etcdctl lock <name>` and concurrency.NewMutex(session, name) contend for the
// same lock as this driver does.
func (d *Driver) LockPrefix(key string) string { return lockPrefix(d.prefix, key) }

// Leases returns the leases the driver keeps alive now, one per distinct lease TTL
// in use. Revoking one (etcdctl lease revoke) ends every lock on it: the driver
// notices at its next keepalive and closes their Lost channels.
func (d *Driver) Leases() []clientv3.LeaseID {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []clientv3.LeaseID
	for _, s := range d.leases {
		select {
		case <-s.ready:
			if s.grantErr == nil {
				ids = append(ids, s.id)
			}
		default:
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// String names the driver by its prefix; it never prints credentials.
func (d *Driver) String() string { return "etcddriver(" + d.prefix + ")" }

// Close revokes the driver's leases, which releases every lock it holds at once
// (their Lost channels close), ends waiting Acquire calls with ErrClosed, stops
// the background keepalives, and closes the client if the driver opened it. It
// waits for the revokes for at most half a second: against a server that does
// not answer, Close returns after that and the leases expire by themselves. Calls
// after Close return ErrClosed; calling Close again returns nil.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	var live []*session
	var lost []lostSet
	for _, s := range d.leases {
		select {
		case <-s.ready:
		default:
			continue // its grant sees closed and revokes
		}
		if s.grantErr != nil {
			continue
		}
		live = append(live, s)
		lost = append(lost, s.endLocked(driver.ErrClosed))
	}
	d.mu.Unlock()
	d.cancel()
	for _, l := range lost {
		l.run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeRevokeTimeout)
	var wg sync.WaitGroup
	for _, s := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = d.c.Revoke(ctx, s.id)
		}()
	}
	wg.Wait()
	cancel()
	d.revokeCancel() // background revokes had as long; they end now
	d.wg.Wait()
	if !d.owned {
		return nil
	}
	err := d.c.Close()
	if d.closeClient != nil {
		d.closeClient()
	}
	return err
}
