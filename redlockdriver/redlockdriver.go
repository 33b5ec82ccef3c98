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
// # The algorithm
//
// Acquire sends the same one-round-trip script (SET key owner NX PX ttl) to all
// N servers at once, each with a per-server timeout far below the TTL, and
// holds the lock when a majority (N/2+1) said yes while the validity time,
// TTL − elapsed − drift, is still positive (elapsed is measured on the
// monotonic clock from just before the requests went out; drift is TTL × 1% +
// 2ms, the allowance package lock subtracts for every backend). Otherwise it
// gives back what it got on every server, including those that did not answer
// (they may have taken it late). The lock's validity deadline, behind Lost, is
// measured from the same start. Refresh extends the lock on every server that
// still holds the owner, and succeeds when a majority did within the remaining
// validity; when a majority no longer holds the owner the lock is reported lost
// at once. Release is owner-checked on every server.
//
// Automatic refresh is batched: package lock hands the locks due together to
// RefreshBatch, which sends each server, pipelined, one GETEX per exclusive
// lock: it extends the key and returns its owner, which the driver compares
// (as plain commands, not in a script, which cost the server 60 % more per
// lock). Where the key holds another owner, the lock is lost there and that
// owner's key has been extended once, which keeps others out longer but
// never lets a second holder in. Each lock's grant record outlives it by ten
// TTLs (at least a minute, at most a day) and is extended only when the lock
// would come within half to a quarter of that of it (the margin differs from
// lock to lock, so that locks granted in a burst do not extend their records
// in one wave); the locks whose record is due go in a script call per 256
// instead (per hash slot, where a server is a Cluster), which extends both,
// and a shared hold has a call of its own. The per-server timeout bounds each call
// from when it is sent to that server, after the calls before it in the
// pipeline, so a batch of tens of thousands of locks, or batches queued
// behind each other on a loaded machine, are not cut by a timeout meant for
// one request; each lock's new validity still counts from the time the batch
// was sent, and the batch never waits past the lock's validity deadline.
// A call carries each lock's key and owner only (its grant record's key
// when that is due): the locks a batch finds lost are then asked about
// ForceRelease tombstones, and given back on the servers that still hold
// them, in one round each for all of them, so that a batch finding
// thousands lost does not hold its other locks' answers back. Locks whose
// Release is under way are left to it.
//
// Capacity: each server spends about 1.0–1.8 µs of CPU per lock per refresh
// (measured at 100,000 locks, alone on a core and sharing one; over a third of
// it finding the key and its expiry), so
// N locks at TTL T ask each server about N × 1.5 µs × 3/T of CPU per second:
// 100,000 locks at 3 s, a seventh of a core. Give the servers that headroom.
// All locks of a Driver wait in one queue per server, so when the servers
// cannot keep up every refresh is late together, and once two refreshes in a
// row take longer than the validity, the locks are lost together: more locks
// than the servers can refresh is not a slow state but a loss of most of
// them. A longer TTL asks less (refreshes come every third of it). Releases
// go ahead of the queue (a release sheds load), though never past a job about
// their own lock, such as its acquire still queued on a slow server;
// acquires do not (new locks wait while the servers are full); a pipeline
// carries at most 4,096 keys.
//
// # URL format
//
//	redlock://?server=URL&server=URL&server=URL[&server=URL...][&server_timeout=DURATION]
//
// Each server parameter is a full go-redis URL of one independent server, with
// its own credentials, database, TLS and go-redis parameters, parsed by
// go-redis's own parser (redis.ParseURL):
//
//	redis://[[user]:password@]host[:port][/db][?param=value&...]
//	rediss://[[user]:password@]host[:port][/db][?...]        TLS (certificates verified)
//
// Examples:
//
//	redlock://?server=redis://10.0.0.1:6379&server=redis://10.0.0.2:6379&server=redis://10.0.0.3:6379
//	redlock://?server=redis://:pw1@10.0.0.1:6379/0&server=rediss://app:pw2@10.0.0.2:6380/0&server=redis://10.0.0.3:6379/0&server_timeout=100ms
//	redlock://?server=redis://:p%26w@10.0.0.1:6379&server=redis://10.0.0.2:6379?dial_timeout%3D1s&server=...
//
// The server URLs sit inside the redlock URL's query, so within them '&',
// '=', '+', '#' and '%' are percent-encoded: the third example's first server
// has the password "p&w", and its second the go-redis parameter dial_timeout.
// Percent-encoding each server URL whole works too; either way no password is
// shown in an error or by Locker.String. At least three servers are required,
// all distinct (the same server twice would count one vote twice); use an
// odd number, as an even one adds a server without adding tolerance. server_timeout (default 100ms) bounds each
// server's answer; it is lowered to a tenth of the TTL for short TTLs, so
// validity is never spent waiting for one slow server. A round ends as soon
// as its outcome is decided (a majority for us or for another owner, or none
// possible), so the timeout is waited out only when the servers that did
// answer leave the outcome open; it is not the common cost of a server being
// down, and it is generous enough not to fail rounds when the client process
// itself is descheduled or paused for GC for tens of milliseconds. Unknown
// parameters, at either level, are errors that list the accepted ones; the portable
// parameters ttl, auto_refresh and prefix (the namespace of every key,
// "distlock" by default) are described in package lock. Open connects to every
// server, waiting at most ten per-server timeouts and never past its
// context's deadline or cancellation: a wrong password, a TLS failure or a
// malformed server URL on any one of them fails Open, and so does reaching
// fewer than a majority (an error matching ErrNoQuorum and
// driver.ErrUnavailable, with each server's error; when a majority refuses
// the connection, as soon as the others have answered, since a refusal is
// known at once); servers merely unreachable (refused, or not answering in
// time) are tolerated, as Redlock tolerates them later. No error
// shows a password, and errors hide nothing else: servers are named by
// position and by their URL with only the password replaced by "xxxxx" (or by
// address).
//
// Programs that already have clients use New with one client per server.
//
// # Key layout
//
// On every server, for the prefix P and the key K, with '%', '{' and '}' in P
// and K escaped as %25, %7B and %7D:
//
//	P:{K}           the lock: a string holding the owner, with the lock's TTL
//	P:{K}:waiters   hash: inbox channel -> deadline (ms, server clock) of a
//	                waiting driver's registration; it lives while drivers wait
//	                and expires two leases (a lease is the TTL, at least 1s)
//	                after the last registration; a driver whose waiters all
//	                gave up removes its entry at once
//	P:inbox:ID      the pub/sub channel of the driver with that random ID
//	P:{K}:holders   sorted set: the owners of shared holds, scored by their
//	                expiry (ms, server clock), while the lock key holds the
//	                marker "\x00shared" (see Read-write locks and semaphores)
//	P:{K}:writers   hash: owner -> deadline (ms, server clock) of a waiting
//	                exclusive request's registration, which holds new
//	                readers back
//	P:{K}:grant     the exclusive holder's record, "owner 0 since-µs label",
//	                outliving the lock by up to ten TTLs (see Inspection,
//	                eviction and leader election)
//	P:{K}:labels    hash: shared holder -> its record, "0 since-µs label"
//	P:{K}:forced    hash: owner evicted by ForceRelease -> "1", for a few TTLs
//
// The lock key is what any Redlock client writes (SET key value NX PX), so
// other Redlock implementations using the same key names exclude and are
// excluded by this driver, shared holds included (the marker takes the key).
//
// # Waiting
//
// A waiting Acquire registers its driver's inbox on the servers where it found
// the lock held, in the same script that tried to take it. A release that
// deletes the lock publishes its key on every registered inbox but the
// releasing driver's own (that one only when no other driver waits), so the
// waiters try again as soon as the lock is free, without polling, and the lock
// passes between drivers instead of the releasing one racing the others to win
// it back. A waiter's registration reaches its last servers after its round
// was decided, so a server may tell the releasing driver itself; that
// driver's waiter acts on its own release only when a majority of the servers
// told it. Should no other driver take the lock (a registered driver that died
// leaves its registration until the registration's lease, the TTL or at least
// a second, runs out), the releasing driver's waiter tries after 5ms. Within one
// Driver only one Acquire per key and mode (exclusive, shared) contends on
// the servers at a time; the others wait behind it in process, so a release
// wakes one contender per driver rather than every goroutine (a shared head
// that wins lets the next shared one try at once). When a round ends in a split vote (no owner got a
// majority, for instance each of three contenders got one server), every
// contender gives its votes back and tries again after a random back-off, as
// the algorithm prescribes; a round that finds another owner holding a majority
// waits for the release (or for that owner's TTL to run out). Each Driver
// subscribes once per server, on one connection per server, when it first
// waits or first holds a lock (see Lost locks). Waiters are not
// served in arrival order (FIFO is not declared): each server orders contenders
// by arrival and the orders need not agree.
//
// # Lost locks
//
// Lost closes when the lock may no longer be held by a majority. Refresh
// (package lock's automatic refresh runs every third of the TTL) reports the
// lock lost when so many servers no longer hold the owner that no majority
// can, and gives back what is left of it; package lock closes Lost when no
// refresh was confirmed before the validity deadline.
//
// A server that crashes or restarts is seen sooner. A driver that holds a
// lock keeps its inbox subscription on every server (one connection per
// server, also when it never waited). When a subscription breaks, the driver
// subscribes again every 10–100ms while the server is away, and as soon as it
// is confirmed checks every held lock on every server: a server votes for a
// lock while the key holds the owner (or, for a shared hold, the owner's
// live member) and the server is still the process
// that granted or last extended the lock there (its run_id, read with INFO).
// A lock that fewer than a majority vote for is reported through
// Request.Lost at once (Lost closes, with an error matching ErrForgotten),
// and what is left of it is given back. A minority forgetting the lock does
// not end it: it is still held by a majority, and refreshes still succeed. A
// server that restarted with the lock's key (with persistence) does not vote
// for it, since its data may be older than the lock's last extension, until
// a refresh extends the lock there again. Measured by
// TestMajorityRestartedEmptyIsReportedWhenTheServersReturn on a shared 2-core
// machine, two of three servers killed (SIGKILL) and started again empty at
// once, with a 30s TTL: Lost closed 16–31ms after the kill, restart included
// (each run's median of 7 rounds 16–17ms, over six runs), 8–13ms before the
// test's own readiness probes saw both servers answer; the next refresh
// would have come 10s after the grant. In the conformance fault suite
// (LostClosesPromptlyWhenBackendRestartsWithoutLocks: three of five servers
// restarted empty one after the other) Lost closes 9–12ms before the last
// restart returns.
// After a longer outage, the check follows a server's return by at most the
// 100ms pause between reconnection attempts, plus one round trip.
//
// Prompt is not early enough for safety: when a majority restarts empty,
// another client can win the lock as soon as those servers answer, at the
// same moment as the check. Only the delayed restart (see Limits) keeps two
// holders apart; with it, the holder's refreshes fail while the majority is
// away, and Lost closes at the validity deadline, before the servers return.
//
// Limits of the check: it learns what servers tell it when they come back,
// so a server that stays away leaves its vote to the refreshes; a lock being
// released is not checked (its own deletes would look like a loss); a server
// whose client is not a plain *redis.Client (a Cluster given to New), or whose
// user may not run INFO, is checked by key alone, so a restart that kept the
// key is not seen there; so is a server that answered a grant after its round
// ended when the driver had just dialled a new connection to it. The run_id
// of the process that granted a lock is known without a round trip while no
// connection to the server was dialled since it was read (at Open, at each
// check), and is read with INFO otherwise (after the server's return, or when
// the pool grows); a restart within the moment between a grant and that
// INFO can attribute the lock to the new process, which then still has the
// key, so only the run_id vote is missed.
//
// The cause of a loss (lock.Err and Do's context.Cause match it):
//
//   - lock.ErrServerChanged: the check on servers' return found that a
//     majority forgot it, servers with a new run_id among them
//     (ErrForgotten matches too);
//   - lock.ErrExpired: a refresh or that check found it gone from too many
//     servers none of which restarted (a deleted key looks like an expired
//     one), or no refresh was confirmed within the TTL (package lock);
//   - lock.ErrForceReleased: ForceRelease evicted it.
//
// # Read-write locks and semaphores
//
// Shared (read) locks (lock.WithShared) are held on a majority, like the
// mutex. On each server a shared hold is a member of P:{K}:holders scored by
// its expiry, and while any exists the lock key holds the marker "\x00shared"
// (no owner starts with a NUL byte) with the expiry of the latest hold:
// redisdriver's layout. shared.lua grants a hold when the key is free or held
// shared and no waiting writer is registered there; an exclusive request
// (acquire.lua's SET NX, or any Redlock client's) needs the key free.
// Refresh, release and the check on a server's return look at the owner's
// own member, so a stale reader can neither extend nor free another's hold,
// and a hold whose member expired is not held. The rule is honest over the
// quorum for the reason the mutex is: a server never holds an exclusive
// owner and a live shared hold at once, and any two majorities share a
// server, so a writer's majority and a reader's cannot both stand; the
// mutex's assumptions (Limits: clocks, delayed restarts, pauses) are the
// same ones, and a shared hold is lost, refreshed and checked on a majority
// exactly as a lock is (Lost locks).
//
// Writer preference, the queueing rule: an exclusive request that waits
// (Acquire, not TryAcquire) registers as a waiting writer in P:{K}:writers
// on every server where it finds the key held, in the same script that tried
// to take it, and renews the registration at each of its rounds (at least
// every third of its lease: the TTL, at least a second). A shared request,
// Acquire or TryAcquire, is not granted on a server where a live waiting
// writer is registered. So once a writer waits on a majority, no reader can
// win a majority: the readers that hold keep their holds, the writer takes
// the key when the last of them leaves (the server announces it), and the
// readers that arrived after it, and those still waiting behind an earlier
// writer, wait until it releases. The registration ends when the request
// ends: its lock released, lost, or its Acquire given up or failed (which
// tells the readers held back at once); a writer whose process died holds
// readers back until its registration's lease runs out, as a dead holder
// holds its lock until its TTL. Preference is about waiting only; exclusion
// never depends on it. When every server answers, a writer that did not win
// is registered on every server it did not win, which is a majority (it won
// fewer than a majority). A writer registered on fewer (servers down or too
// slow) may see readers pass it until a later round registers it on a
// majority; readers whose rounds cross the writer's (the servers may
// order the two differently) count as arrived before it. Readers of one
// Driver contend one at a time, but one that wins lets the next try at once:
// none waits for another's release. A stream of writers can
// hold readers back for as long as it lasts. Measured by the conformance
// property WriterIsNotStarvedByAStreamOfReaders (five servers, a shared
// 2-core machine, -race): a writer arriving among readers that come every
// 4ms and hold 20ms waited at most 29–115ms per run (most runs; 1s and 3s
// streams alike), and up to 370ms with the machine's load average at 8 (the
// bound is 750ms; without the preference it waits for the whole stream).
//
// Semaphores (lock.WithPermits(n), n >= 2) are not offered: they are
// ErrUnsupported, before anything is sent. A semaphore counted by each
// server and granted on a majority admits more than n holders: with three
// servers and n = 2, holder A wins {s1, s2}, B {s2, s3} and C {s1, s3}; each
// has a majority, no server counts more than two, and three hold at once
// (TestMajoritySemaphoreAdmitsMoreThanNHolders does exactly this on real
// servers). Two majorities intersect, but a server in the intersection
// excludes only the (n+1)-th holder it sees, and the n+1 holders need not
// meet on any one server. It is safe only if every holder wins Q servers
// with (n+1)·Q > n·N (then some server is in the sets of any n+1 holders,
// and refuses one): Q = N for three servers and n = 2 (one server down
// blocks every grant), and Q = N for any N once n >= N - 1, which gives up
// what Redlock is for.
// Use redisdriver (one server), or the etcd, ZooKeeper or PostgreSQL drivers.
// lock.WithPermits(1) is the exclusive lock (package lock sends it as one).
//
// # Inspection, eviction and leader election
//
// The driver implements driver.Inspector, driver.Lister, driver.Evictor and
// driver.Labeler (Inspect, Leader, Observe, List, ForceRelease, Proclaim in
// package lock); not driver.Watcher (below).
//
// Layout. Beside the lock key, on each server, the acquire script writes the
// holder's record in the same step as its SET NX: P:{K}:grant, "owner 0
// since-µs label", whose TTL is the lock's plus ten TTLs (at least a minute,
// at most a day), extended by a refresh only when the lock would come within
// half of that margin of it (so most refreshes cost one command a lock, not
// two), and deleted by the release (for a shared hold: the owner's entry in
// the hash P:{K}:labels, which lives as long as the holders set). A holder
// that dies without releasing leaves its record up to that margin after its
// lock; Inspect reads a record only beside a lock key that holds the record's
// owner, and the next holder's grant overwrites it. 0 stands for the
// token (there is none); since is the holder's clock at the start of the
// round that won the lock; label is what package lock publishes (the owner
// name, the time it asked, a leader's value). It is redisdriver's record,
// less the token. The lock key still holds nothing but the owner, so other
// Redlock clients exclude and are excluded as before
// (TestPlainRedlockClientStillInteroperates), and their locks show in Inspect,
// named by their value. The record costs the uncontended acquire and release
// one more SET and one more DEL inside the scripts already sent, no round
// trip: about 0.4µs of server time per script call (INFO commandstats, 10,000
// acquire and release pairs on one server: 2.1µs per call without the record,
// 2.5µs with it). BenchmarkUncontended (-count 5, twice each, before and
// after, alternating, on a loaded 2-core machine where the three servers
// share the client's cores) puts an acquire and release at 1.113 times the
// raw three-server protocol before and 1.149 after for TryAcquire, 1.133 and
// 1.164 for Acquire (medians of ten; the same code varies by ±0.03 from one
// set of five to the next): about 3%, some 5µs of 165–190µs. (Reading the
// servers' clock with TIME for since cost another 0.7µs per call, which is
// why since is the holder's.)
//
// Inspect runs one script on every server at once, as a round does, and waits
// for every answer, at most the per-server timeout or 500ms, whichever is
// longer. It needs a majority of answers (else an error matching ErrNoQuorum,
// and driver.ErrUnavailable when that may pass) and reports a holder only
// where a majority of the servers hold its owner: what an acquire round would
// find held. A minority's view is not reported: an owner on fewer servers is
// a contender whose round is under way, what is left of a lost lock being
// given back, or a lock an operator freed on a majority; the key reads free,
// though an Acquire may find a split vote there for a moment. What is exact
// and what is approximate:
//
//   - Holders, Owner, Shared: what the servers held when each answered; they
//     answer at slightly different moments, so a lock changing hands during
//     Inspect can read as free.
//   - Since: the median of the majority's records (one client clock read
//     once, so they agree unless a Relabel or a retried grant made them
//     differ). Where no record is found (another client's lock) it is zero.
//   - Expires: when fewer than a majority would still hold the lock unless it
//     is refreshed (the majority-th latest of the servers' expiries, each
//     taken from the moment before Inspect sent its requests, so early by up
//     to a round trip), less package lock's drift allowance (1% of what is
//     left, plus 2ms): an estimate by the inspecting process's clock, not a
//     promise; a server whose clock runs fast ends it sooner.
//   - Token: 0 (no fencing). Leader.Token is 0, and Leadership.Token panics
//     as Lock.Token does.
//   - Waiters: -1. The servers record waiting drivers (one registration per
//     driver and key, whatever its number of waiting requests, outliving its
//     last waiter by up to a lease), not waiting requests.
//   - Permits: 0 (no semaphores).
//
// List scans each server at once (SCAN, type string, for the lock keys under
// the prefix, then their values; every primary of a Cluster given to New),
// needs a majority of answers, and lists a key when a majority of the
// servers hold it with one value: one owner, or the shared marker (then a
// majority holds readers, though for a moment of contention perhaps no one
// reader holds a majority). It reads every server's whole keyspace, a page
// of 1000 keys at a time.
//
// ForceRelease runs force.lua on every server at once: it deletes the lock,
// the holders set and the records whoever holds them, tells the waiting
// drivers as a release does, and leaves a tombstone for each evicted owner
// in P:{K}:forced, living three times what was left of the lock's TTL plus a
// second. The evicted holder's next refresh (package lock refreshes every
// third of the TTL), and its driver's check when a server comes back, read
// the tombstone: Refresh returns driver.ErrNotHeld wrapping
// driver.ErrForceReleased, Lost closes and Err matches lock.ErrForceReleased.
// A holder in the Driver that called ForceRelease learns it at once. Its
// Release then returns ErrNotHeld and, being owner-checked, cannot free the
// next holder's lock. ForceRelease returns how many owners it evicted on the
// servers that answered (leftovers of a minority included: they would weigh
// on the next majority), ErrNotHeld when none, and an error matching
// ErrNoQuorum when fewer than a majority answered (the key may then be freed
// on some servers only; call it again). Without fencing nothing stops an
// evicted holder that keeps acting until its next refresh (up to a third of
// its TTL, longer while it is paused): force-release a lock only when its
// holder is stuck, or when the resource tolerates a late write.
//
// Relabel (Leadership.Proclaim, and Campaign, which publishes the moment it
// won) replaces the label in the owner's record on every server where the
// owner holds the lock: it succeeds on a majority, returns ErrNotHeld when
// too many servers no longer hold the owner for a majority to, and otherwise
// an error matching ErrNoQuorum; the servers may then disagree, and Inspect
// reports the label most of the majority store. It keeps the record's since.
//
// Watch is not implemented, so Observe looks every 250ms (and just after the
// leader's Expires): observe-latency in the conformance suite 251–292ms. The
// servers publish only to the inboxes of drivers registered as waiting for a
// key; telling watchers of every change would take a look at a watcher
// registry in every acquire and release script on every server (the hot
// path), and a watcher's registration kept alive on a majority.
//
// Leader election (lock.Campaign) is an exclusive lock on the election's name
// over the quorum, and passes the conformance properties: at most one
// leader at a time (ExactlyOneLeaderAmongCampaigners), Resign hands over at
// the release's announcement (ResignHandsOverPromptly: median 2.4–3ms), and a
// killed leader's successor leads once its TTL runs out
// (KilledLeaderProcessIsReplaced: 1.0–1.06s with the suite's 1s TTL). Terms
// are 0: with no fencing, a deposed leader (paused past its TTL, or whose
// majority forgot it) may act while its successor leads, and nothing on the
// resource can tell their writes apart; the Limits below are a leader's
// too. Where that matters, elect with the etcd, ZooKeeper or PostgreSQL
// drivers.
//
// # Capabilities
//
//   - Fencing: no. Two majorities need not agree on a counter (Kleppmann, "How
//     to do distributed locking"), so no token minted by Redlock strictly
//     increases across holders; Token returns ErrUnsupported. Use the etcd,
//     ZooKeeper or PostgreSQL drivers where the protected resource must reject
//     a stale holder.
//   - Expiring: yes; the lock is a key with a TTL on each server.
//   - Notify: yes; releases publish to the waiting drivers' inboxes.
//   - FIFO: no; see Waiting.
//   - Shared: yes; see Read-write locks and semaphores.
//   - WriterPreference: yes; the queueing rule is in Read-write locks and
//     semaphores.
//   - Permits: no; a semaphore over a majority would admit more than n
//     holders (see Read-write locks and semaphores).
//   - MinTTL: 100ms, so that the per-server timeout (at most a tenth of the
//     TTL) is at least 10ms.
//   - MaxTTL: 366 days (driver.DefaultMaxTTL), package lock's longest TTL.
//     The driver itself carries the whole range of time.Duration (about 292
//     years): TTLs go to the servers in whole milliseconds rounded up, which
//     cannot overflow, and at most 9.2e12 ms plus a server's clock fits
//     Redis's 64-bit expiry time; the largest number the scripts compute (a
//     registration's deadline, the server clock plus twice the lease) stays
//     below 2^53, where Lua's numbers are exact integers. A PTTL read back is
//     capped at 146 years before conversion.
//
// # Limits
//
// Redlock's safety rests on assumptions no client can check; they are the
// operator's to keep:
//
//   - Clocks: a server whose clock jumps forward expires its keys early. If a
//     majority minus one servers keep the lock and one jumps, a second client
//     can win a majority while the first still holds. Run servers with a
//     slewing (not stepping) time service.
//   - Restarts: a server restarted without persistence forgets its locks, and
//     if it was part of a holder's majority, another client can win a majority
//     that overlaps the holder's. Either delay a restarted server's return by
//     at least the longest TTL in use (antirez's "delayed restart"), or run
//     with appendonly yes and appendfsync always. Without either, the holder
//     learns that a majority forgot its lock within milliseconds of the
//     servers' return (see Lost locks), but another client may take the lock
//     in those same milliseconds.
//   - Process pauses: a holder paused (GC, swap, VM migration, SIGSTOP) beyond
//     its validity may still act after its lock expired and was taken by
//     another; Lost closes when the deadline passes, but a paused process
//     cannot read it in time. Without fencing nothing on the resource side
//     catches that; this is why fencing is declared unsupported above.
//   - Network delays beyond the drift allowance break the same assumption as
//     pauses do.
//
// A server that does not answer costs at most the per-server timeout per
// round (a batched refresh: per script call of the batch), except in Release, which waits up to 500ms (or the per-server
// timeout, if longer) for a majority: it spends no validity, ends as soon as
// a majority answered, and a Release left undecided by a slow moment keeps
// the lock held until its caller retries it.
//
// # Errors
//
// Each call makes one round (Acquire: one round per look at the lock, and it
// looks again only when woken, when the holder's TTL runs out, or after a
// split vote, which the algorithm resolves with a random back-off). A round
// waits for each server at most the per-server timeout (server_timeout), so
// against servers that answer nothing a TryAcquire whose context has no
// deadline fails with ErrNoQuorum and driver.ErrUnavailable after it. A round
// that finds the lock held by a majority, or a split vote, is ErrLocked
// (contended). With fewer than a majority answering, the call fails with an
// error matching ErrNoQuorum that names the servers and why each failed; it
// also matches driver.ErrUnavailable (package lock retries it within the
// caller's context) when the servers that failed for a reason that may pass
// (refused or reset connections, timeouts, LOADING, READONLY and the like)
// could still make a majority, and is permanent when servers that refused us
// for good (NOAUTH, WRONGPASS, NOPERM) stand in the way. A majority won only
// after the lock's validity ran out matches driver.ErrUnavailable. Release and
// Refresh report an undecided outcome the same way, and a retry of a Release
// continues from what the first one learned.
//
// # Logging and Close
//
// The driver prints nothing: its init replaces go-redis's default logger,
// which writes to stderr, with one that routes the lines (a program's own
// logger, set with redis.SetLogger in main, is kept; see redisdriver). Given
// a logger by a Locker (lock.WithLogger; driver.LoggerUser), it logs there
// as redisdriver does: a failed dial to one of the servers at Warn, once per
// run of failures to that address (one server of five down leaves the
// Locker working, and this line is then the only sign of it), the first dial
// that succeeds after it at Info, and go-redis's lines printed with the
// context of the driver's calls; the other lines are dropped. Close
// of a driver opened from a URL returns within about a second even when
// servers stopped answering: requests still in flight are cut off by closing
// the clients, and go-redis's own dials in flight are ended. One goroutine
// may outlive Close by up to a second: after 10 × GOMAXPROCS failed dials in a
// row to a server, go-redis probes it once a second in the background and
// sees the closed client only after its sleep. With clients given to New, a request in flight ends at its
// per-server deadline.
// Locks must not be evicted: run the servers with a noeviction maxmemory
// policy. A *redis.Ring is refused by New (its shards are not independent
// voters). Clients given to New should set ContextTimeoutEnabled, so the
// per-server timeout interrupts a server that stopped answering rather than
// the client's read timeout, and DialerRetries 1 and MaxRetries -1 (as URLs
// do), so that a round learns why a server failed rather than a timeout.
package redlockdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
)

// DefaultPrefix is the namespace of every key when no prefix is given.
const DefaultPrefix = "distlock"

// DefaultServerTimeout bounds each server's answer when no other is given. It
// is lowered to a tenth of the lock's TTL for short TTLs.
const DefaultServerTimeout = 100 * time.Millisecond

// MinServers is the fewest servers a Driver accepts: with fewer, a majority
// tolerates no failure and Redlock gains nothing over one server.
const MinServers = 3

// minTTL is Capabilities.MinTTL: a tenth of it is the shortest per-server
// timeout.
const minTTL = 100 * time.Millisecond

// maxTTL is the longest TTL the driver carries: no TTL a time.Duration can
// hold overflows on its way to the servers (see Capabilities in the package
// documentation). Package lock accepts less, Capabilities.MaxTTL.
const maxTTL = time.Duration(math.MaxInt64)

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
// lock.New or lock.Open; its methods implement driver.Driver, driver.Acquirer
// and driver.BatchRefresher.
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

	mu       sync.Mutex
	closed   bool
	groups   map[string]*group // Acquire calls waiting, by lock key
	sub      subscription
	held     map[*request]heldLock // locks granted and not yet ended
	idSets   map[string]*[]string  // the interned run_id slices (see intern)
	lastIDs  *[]string             // the one interned last
	phase    uint8                 // the last heldLock.phase given
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
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("redlockdriver: %w", err)
	}
	d := &Driver{
		servers: servers,
		quorum:  len(servers)/2 + 1,
		grace:   otherDriverGrace,
		quit:    make(chan struct{}),
		groups:  map[string]*group{},
		held:    map[*request]heldLock{},
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
	d.inbox = d.prefix + ":inbox:" + hex.EncodeToString(id[:])
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
	return driver.Capabilities{Expiring: true, Notify: true, Shared: true, WriterPreference: true, MinTTL: minTTL, MaxTTL: min(maxTTL, driver.DefaultMaxTTL)}
}

// begin registers a call, or returns ErrClosed after Close, or ctx's error.
// Close waits for registered calls before it stops the workers.
func (d *Driver) begin(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.ErrClosed
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
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
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
