// Package redisdriver is the distlock driver for Redis and Valkey: a standalone
// server, a Sentinel-managed primary, or a Redis Cluster.
//
//	import _ "github.com/distlock/lock/redisdriver"
//
//	locker, err := lock.Open(ctx, "redis://:password@redis.internal:6379/0")
//
// A lock is the Redis string `SET key owner NX PX ttl`, taken by a Lua script
// that also mints the fencing token in the same round trip. Release and refresh
// are Lua scripts that compare the owner first, so a holder whose lock expired
// can neither delete nor extend its successor's lock. Because the lock key holds
// only a string (the owner; without fencing the owner and the label), any client of the standard pattern (`SET key value NX
// PX ttl`, compare-and-delete to release) excludes and is excluded by this
// driver's locks on the same key. The scripts are sent with EVALSHA, and with
// EVAL after a NOSCRIPT answer.
//
// # URL format
//
//	redis://[[user]:password@]host[:port][/db][?param=value&...]
//	rediss://[[user]:password@]host[:port][/db][?...]              TLS
//	redis+unix://[[user]:password@]/path/to/redis.sock[?db=N&...]   unix socket
//	redis+sentinel://[[user]:password@]host:port[/db]?master_name=NAME[&addr=host:port...][&username=U&password=P]
//	rediss+sentinel://...                                          Sentinel, TLS
//	redis+cluster://[[user]:password@]host:port[?addr=host:port...]
//	rediss+cluster://...                                           Cluster, TLS
//
// Examples:
//
//	redis://localhost:6379/0
//	rediss://app:s3cret@redis.example.com:6380/2?dial_timeout=2s
//	redis+unix://:s3cret@/run/redis/redis.sock?db=1
//	redis+sentinel://sentinel-1:26379?master_name=mymaster&addr=sentinel-2:26379&password=s3cret
//	redis+cluster://node-1:7000?addr=node-2:7000&addr=node-3:7000
//
// Each form is parsed by go-redis's own parser (ParseURL, ParseFailoverURL,
// ParseClusterURL), so its query parameters are go-redis's: timeouts, pool sizes,
// client_name, protocol, and for rediss skip_verify (off by default: certificates
// are verified against the system roots, and TLS never falls back to plain text).
// In the Sentinel form the user and password of the URL authenticate with the
// sentinels and the username and password parameters with the primary; further
// sentinels and cluster nodes are given as addr parameters. An unknown parameter
// is an error that lists the accepted ones. The driver's own parameter is
// fencing (true by default; fencing=false is WithFencing(false), see Without
// fencing). The portable parameters ttl,
// auto_refresh and prefix (the namespace of every key, "distlock" by default) are
// described in package lock. Open connects once, so a wrong or missing
// password, a missing ACL permission or a TLS failure fails Open (with the
// server's answer, never the password, as a permanent error) and an
// unreachable server fails it as driver.ErrUnavailable. Open honours its
// context's deadline and cancellation in every step (dial, handshake, the
// check); the driver always honours context deadlines (go-redis's
// ContextTimeoutEnabled) and makes one dial attempt per connection.
// Sentinel options that send writes to replicas (replica_only, route_by_latency,
// route_randomly, use_disconnected_replicas) are refused: a lock must be written
// on the primary.
//
// Programs that already have a client use New, with a *redis.Client, a
// *redis.ClusterClient or a failover client (not a *redis.Ring, whose shards do
// not share pub/sub). New adds a hook to the client that counts the
// connections it dials (see Lost locks); the hook stays with the client.
//
// # Key layout
//
// For the prefix P and the key K, with '%', '{' and '}' in P and K escaped as
// %25, %7B and %7D:
//
//	P:{K}          the lock: a string holding the owner (without fencing: owner,
//	               NUL, label), with the lock's TTL
//	P:{K}:fence    the last fencing token, and after an exclusive grant the holder's
//	               record: "token since-µs owner label"; expires a day after the
//	               last grant's TTL, or the refresh that extended it (see Inspection)
//	P:{K}:queue    the list of waiting owners, oldest first
//	P:{K}:waiters  hash of waiting owner -> "lease deadline (ms), TTL (ms), inbox channel",
//	               prefixed "s" for a shared request and "pN/" for a permit of N
//	P:{K}:holders  sorted set of shared or permit holders, scored by their expiry (ms)
//	P:{K}:labels   hash of shared or permit holder -> "token since-µs label", of
//	               waiting owner -> "0 0 label", and "\x00watch" -> the deadline (ms)
//	               of the watchers' interest
//	P:{K}:forced   hash of owners evicted by ForceRelease, for a few TTLs
//	P:{K}:watch    (a pub/sub channel) told of every change of K's holders while watched
//	P:inbox:ID     the pub/sub channel on which the driver with that random ID
//	               is told that a lock was handed to one of its waiters
//
// The braces are a Cluster hash tag, so the keys of a lock share a slot and a
// brace in a key cannot move it. Everything the driver writes lives under the
// prefix. The queue keys exist only while someone waits, the holders key only
// while shared or permit holds exist (it expires with the latest of them),
// the labels hash while a shaped hold, a waiter or a watcher needs it.
//
// # Fencing
//
// Each grant mints a token: the previous token plus one, but never less than the
// server's clock in microseconds (TIME). The fence record therefore only guards
// against a clock that steps back; when it is gone (a restart without
// persistence, a failover to a replica that had not received it, a day after
// the last grant or refresh) the next token still exceeds every earlier one,
// provided the server granting it reads a later time than the server that
// granted the earlier ones.
// Tokens are about 1.8e15 today and stay below 2^53 (exact in JSON and
// JavaScript) until the year 2255.
//
// # Fenced writes
//
// When the resource the lock guards is itself a Redis value, Fenced makes the
// check the README asks of a resource: Fenced.Set, HSet and Del run one
// script that compares the writer's token with the largest token admitted
// for the key and writes, or refuses with an error matching fence.ErrStale,
// atomically. Equal tokens are admitted (one holder writes many times), token
// 0 never is. The token lives in its own key, TokenKey(key) =
// "{T}:fence:"+key, where T is the key's hash tag or, without one, the whole
// key, so both keys share a Cluster slot; it has no TTL and survives Del.
// The lock may live anywhere (another server, another backend): the token
// comes from the lock, the check from the resource.
//
//	l, err := locker.Acquire(ctx, "invoice:42")
//	...
//	err = redisdriver.Fenced{Client: rdb}.Set(ctx, "invoice:42:state", "paid", l.Token(), 0)
//	if errors.Is(err, fence.ErrStale) {
//		// a newer holder has written: this one lost the lock while paused
//	}
//
// # Without fencing
//
// fencing=false (WithFencing(false)) is the faster, weaker choice, for users
// who do not pass tokens to the resources they guard: Capabilities.Fencing is
// false, so package lock's Token panics with ErrUnsupported (as on Redlock),
// Grant.Token, Inspect's tokens and a leader's term are 0.
//
// The lock then takes bsm/redislock's layout: its value carries the owner, a
// NUL byte and the label ("owner\x00label"; owners are never empty and hold
// no NUL, and a shaped hold's marker starts with one), so nothing is written
// beside it. An uncontended TryAcquire is the standard pattern's single
// command, SET key value NX PX ttl, and nothing else: watchers hear of it
// from the server's client-side tracking of the key (see Watch below). In a
// Cluster, where watches do not track, an HGET of the watchers' deadline
// goes in the same round trip, so that a watched key's watchers are told of
// the grant (by a PUBLISH, one more round trip, only then). Only when the
// key is taken does a script (plain.lua, then acquire.lua's slow path) tell another
// owner's lock from a lock already ours (a retry), a semaphore or a value of
// another type. Acquire's first try stays a script (plain.lua), since it must
// not pass a queued waiter: one EXISTS of the queue and the labels (anyone
// queued or watching), the same SET NX PX, and only when either exists the
// watchers' check. Release is the compare-and-delete script with one more
// command, EXISTS of the queue and the labels, and hands the key to the queue
// head, or tells watchers, only when they exist; refresh compares the value's
// owner (the batched refresh.lua reads both layouts) and has no record to
// keep alive; Inspect, Relabel (which rewrites the value, keeping its TTL),
// List, ForceRelease and Watch read the owner and label from the value. A
// handoff to a waiter and a grant by acquire.lua's slow path still write the
// owner alone and mint a token in the fence record, unreported; every script
// reads both layouts, so drivers with and without fencing may share keys (the
// fencing ones' tokens keep increasing: a grant without fencing leaves the
// fence record as it is).
//
// A TryAcquire without fencing, like one with it, takes any free key: a key
// is free while waiters queue only when its holder vanished without releasing
// (its TTL ran out, or it was deleted by hand), since a release hands the key
// to the first live waiter in the same script. So no newcomer's SET NX passes
// a handoff (TestWithoutFencingATryingNewcomerNeverPassesAHandoff), and
// Acquire keeps the queue's order as with fencing. A standard SET NX client
// with a value of its own and this driver exclude each other either way.
//
// What fencing=false drops is exactly the tokens: a holder that paused past
// its TTL (or lost its lock to a failover, or a restart without persistence)
// cannot be told from its successor by the resource, where with fencing it
// could.
//
// Cost, measured with BenchmarkUncontended (TryAcquire and Release against
// the floor of SET NX PX and the compare-and-delete script; 10 runs
// interleaved with the previous version on a shared 2-core machine, medians
// with benchstat's spread): 1.14× the floor (±2%) against 1.26× (±6%) with
// the earlier acquire script; 0.86× the driver with fencing; through package
// lock 1.22× against 1.32×. The acquire then also sent an HGET of the
// watchers' deadline in the same round trip (a floor with that HGET measured
// 1.085× the floor, ±10%, 8 runs); since Watch tracks the key instead (outside
// a Cluster), the path measured 0.98× the floor (±30%) against 1.19× (±17%)
// with the HGET, and 0.76× the driver with fencing against 0.95× (12 runs
// interleaved with the previous version, p=0.014, on a machine so loaded that
// the floor itself took 90–130µs). What remains above the floor is the
// release's extra EXISTS and the driver's bookkeeping (the granting server,
// the held lock's entry).
//
// # Waiting
//
// A waiting Acquire joins the lock's queue; release.lua hands the lock to the
// first live waiter and publishes "<owner> <token>" on that waiter's inbox
// channel, so the waiter holds the lock without another round trip and no other
// waiter wakes. Each Driver subscribes once, on one connection, to its own
// inbox, which serves all of its waiting keys. A waiter renews its place every
// third of its lease (the lock's TTL, at least a second) and looks again when the
// holder's TTL runs out, so a holder that vanished without releasing (or a lock
// deleted by hand, or a standard client's lock) delays it by that TTL at most.
// A waiter that dies keeps its place until its lease ends, and a lock handed to
// it in that time stays until its TTL ends: a dead waiter delays the others by
// up to twice its TTL. A waiter that gives up (its context ends) leaves the
// queue, and passes on a lock handed to it meanwhile.
//
// # Read-write locks and semaphores
//
// A shared hold (lock.WithShared) or a permit of a semaphore of n
// (lock.WithPermits(n), n >= 2) is a member of P:{K}:holders, scored by its
// expiry; while any exists, the lock key P:{K} holds a marker instead of an
// owner ("\x00shared", or "\x00permits N" with the semaphore's n), with the
// expiry of the latest hold. So the mutex's layout is unchanged, an exclusive
// request (this driver's or a standard SET NX client's) finds the key taken
// while readers hold it, and a semaphore's n is stored beside its holders.
// shaped.lua takes a hold in one round trip, like acquire.lua the mutex;
// refresh (shapedrefresh.lua) and release (shapedrelease.lua) check the
// holder's own member, so a stale holder can neither extend nor free another
// one's hold; a hold whose member expired is not held, and expired members
// are removed by the next script that counts the holders. Every grant, of
// any shape, mints its token from the key's one fence record by the rule of
// Fencing, so a writer's token exceeds every reader's before it. Lost
// locks, Close and the waiters' leases work as for the mutex.
//
// Requests of every shape wait in the key's one queue, in arrival order. The
// queueing rule: a request that is not queued (TryAcquire, and Acquire's
// first try) counts as arriving after every queued one, and
//
//   - an exclusive request is granted when no hold of any kind exists and no
//     live waiter is ahead of it (the mutex's rule);
//   - a shared request is granted when no exclusive lock is held and no live
//     exclusive request waits ahead of it (shared waiters ahead of it do not
//     hold it back: they could be granted too);
//   - a permit of n is granted when fewer than n live permits are held and no
//     live request waits ahead of it.
//
// A release hands the key to the waiters at the head of the queue that the
// rule now admits, each told on its inbox: the first exclusive waiter alone,
// or the first shared waiter and every shared waiter right behind it up to
// the next exclusive one, or permit waiters while permits are free. So once
// an exclusive request waits, shared requests that arrive after it wait
// behind it, and readers that arrived before it keep their turn: a stream of
// overlapping readers delays a writer by the readers ahead of it only
// (WriterIsNotStarvedByAStreamOfReaders: 25ms at worst, 1s and 3s streams
// alike). Unlike the mutex's, a shaped TryAcquire never passes a live
// waiter. A waiter whose turn comes by an expiry rather than a release looks
// again when the hold that kept it out ends as it saw it at its last look (the
// exclusive holder's TTL, the latest shared hold's, the earliest permit's) or
// when the lease of the waiter ahead of it ends, and at least every third of
// its lease: a reader or permit holder that vanished delays the waiters by its
// TTL plus at most a third of their lease.
//
// A key is a read-write lock or a semaphore of one n while anyone holds it:
// a permit request on a key held exclusively or shared, a shared or
// exclusive request on a semaphore, a permit of another n, or a request
// queued behind a live waiter of another such shape, is driver.ErrInvalidArgument
// and changes nothing. (An exclusive request that only waits behind permit
// waiters, with no permit held, is not detected.)
//
// # Inspection, eviction and leader election
//
// The driver implements driver.Inspector, driver.Lister, driver.Evictor,
// driver.Labeler and driver.Watcher, so package lock's Inspect, List,
// ForceRelease, Campaign (with Proclaim), Leader and Observe all work on it.
//
// Layout. The lock key still holds the plain owner (or a shaped hold's
// marker; without fencing, the owner and the label, see Without fencing), so
// standard SET NX clients keep excluding and being excluded. What
// Inspect reports is kept beside it, in the same slot: the exclusive holder's
// record rides in the fence record, which every grant writes anyway ("token
// since-µs owner label", one SET ... GET in the acquire script as before);
// a shared or permit holder's record ("token since-µs label") is a field of
// the hash P:{K}:labels, where a waiter also leaves its label when it joins
// the queue, so that the release that hands it the lock writes its record.
// since-µs is the server's clock (TIME) at the grant, the time the token was
// minted from. A lock's first refresh makes the fence record outlive the lock
// by a day, and a later refresh extends it again only when the lock would
// come within half a day of its end (the driver remembers when it expires),
// so a lock held for days keeps its record without a command per refresh. A driver of an
// earlier version on the same server reads such a fence record as no record:
// its tokens then come from the clock alone, and its grants publish nothing
// to watchers.
//
// Inspect is one script (inspect.lua) that reads, by the server's clock, the
// lock key and its PTTL, the records, the live members of P:{K}:holders, the
// fence record and the queue. Exact: the holders and their shapes, each
// holder's token and label, Since (the server's clock at the grant), Expires
// (the server's clock plus the PTTL: the exclusive lock's, or the shaped
// hold's own expiry), Token (the fence record's, the latest token granted;
// 0 once the record expired, a day after the last grant or refresh, when no
// holder's record tells more), Permits, and Waiters (the queued owners whose
// lease has not run out; a waiter that died counts until its lease ends). A lock taken by a
// standard SET NX client has no record: it is reported with its value as the
// label (so Info.Owner is that value), token 0 and no Since (the portable
// layer then has no time either). A record deleted by hand (or overwritten by
// a driver before this one, which writes the token alone) is reported the
// same way; Relabel writes one again, with the fence's token.
//
// List is SCAN MATCH P:{<escaped prefix>*} TYPE string, on every primary of
// a Cluster, keeping the lock keys (the driver's only keys ending with a
// closing brace). Like SCAN it is approximate for keys granted or freed
// while it runs, and it lists a standard SET NX client's lock too.
//
// ForceRelease is one script (force.lua): it deletes the lock key and the
// shaped holders' records, sets the fence record to the largest token it
// knows (the fence's, every evicted shaped holder's), so the next token
// exceeds every evicted one by the rule of Fencing, writes a tombstone for
// every evicted owner in P:{K}:forced (living 10s plus three times the
// evicted holds' remaining TTL; it only grows while evictions follow each
// other), hands the key to its waiters as a release does, and tells the
// watchers. An evicted holder learns it at its next refresh (package lock
// refreshes every third of the TTL), which returns driver.ErrNotHeld
// wrapping driver.ErrForceReleased (Lock.Err matches lock.ErrForceReleased;
// Relabel, so Proclaim, answers the same); a refresh that comes after the
// tombstone expired reports a plain loss. The evicted holder's Release is
// owner-checked, so it frees no later holder.
//
// Relabel (Proclaim) rewrites the label in the holder's own record, keeping
// its token and grant time, only if the owner still holds the key.
//
// Watch subscribes, on a connection of its own, to the channel P:{K}:watch,
// then writes the watchers' deadline (30s ahead by the server's clock,
// renewed every 10s while watched) in P:{K}:labels. Until that deadline the
// scripts that grant, release, hand over, force-release or relabel K publish
// on the channel. Outside a Cluster the connection also turns on client-side
// tracking (CLIENT TRACKING ON REDIRECT <its own id> BCAST PREFIX P:{K}, on
// RESP2, subscribed to __redis__:invalidate; again on every reconnection,
// before it subscribes again), so that every change of the lock key signals,
// whoever makes it: TryAcquire without fencing (a bare SET NX PX), a
// standard SET NX client's grant and release, an expiry (when the server
// expires the key: at once with few keys, possibly later on a server with
// very many expiring keys), a flush. A refresh (PEXPIRE of the key) signals
// too, a signal without a change. In a Cluster, tracking would report only
// the node the connection talks to, which a slot can leave (resharding,
// failover); there expiries and standard clients' grants and releases are
// not announced (Observe looks again when the leader's Expires passes, and
// its safety poll, every 2s, finds the rest at worst). The
// channel is a plain PUBLISH channel (Redis 6.2 has no sharded pub/sub),
// which a Cluster broadcasts to every node; since only watched keys publish,
// that costs nothing to others. A watch whose connection breaks subscribes
// again, writes the deadline again (a restarted server lost it) and signals
// once it is back (a change may have been missed).
//
// Cost on the mutex's hot path: no round trip and no key is added. The
// acquire script takes the label as an argument and two more keys (holders
// and labels, 6 in all), writes a longer fence record in the SET ... GET it
// did before, and reads the watchers' deadline (one HGET); the release's
// fast path checks labels in the EXISTS it did for the queue (TryAcquire
// without fencing reads nothing, outside a Cluster: see Without fencing).
// Measured on the
// server (INFO commandstats, uncontended TryAcquire and Release with a 60-byte
// label, Redis 7.0 on a shared 2-core machine): 7.8–8.1µs of server time per
// acquire and release against 5.7–6.6µs before, about 2µs more on a round
// trip pair of about 50µs on loopback. Refresh does not extend the fence
// record each time (see above): 2 server commands per lock per refresh.
//
// # Capabilities
//
//   - Fencing: yes; minted in the acquire script, see Fencing. No with
//     fencing=false (see Without fencing).
//   - Expiring: yes; a lock is a key with a TTL, extended by refresh.
//   - Notify: yes; a release hands the lock to the first waiter and tells it on
//     its pub/sub inbox; a lock that expires is found when its TTL runs out.
//   - FIFO: yes; waiters are granted in the order the server queued them, also
//     when a holder vanishes. A waiter that cannot renew its place within its
//     lease (a process paused that long) loses it, and a server restart loses
//     the queue. TryAcquire does not queue, and takes a lock it finds free even
//     if waiters queue for it (its holder vanished and they have not looked
//     again yet).
//   - Shared: yes, with writer preference (WriterPreference); see
//     Read-write locks and semaphores.
//   - Permits: yes; a mismatched number of permits, or a semaphore used as a
//     lock, is ErrInvalidArgument (see Read-write locks and semaphores).
//   - MinTTL: 10ms (driver.FloorTTL), package lock's shortest TTL; PX itself
//     would take 1ms, but the drift allowance would leave such a lock no
//     validity.
//   - MaxTTL: 366 days (driver.DefaultMaxTTL), package lock's longest TTL.
//     The driver itself carries the whole range of time.Duration (about 292
//     years): TTLs go to the server in whole milliseconds rounded up, which
//     cannot overflow, and at most 9.2e12 ms plus the server clock fits
//     Redis's 64-bit expiry time with room to spare; the largest numbers the
//     scripts compute (the fence record's expiry, TTL plus a day; a waiter's
//     deadline, the server clock plus its lease) stay below 2^53, where Lua's
//     numbers are exact integers. A PTTL read back is capped at 146 years
//     before conversion.
//
// # Lost locks
//
// Refresh reports a lock as not held when its key is gone or holds another
// owner, and when the server that granted it was restarted or replaced: each
// lock remembers the run_id of the server that granted it, and every refresh
// reads that server's run_id again (INFO, in the same pipeline, so on the same
// connection as the scripts). A lock lost that way is released on the new
// server. A lock taken after a restart is the new server's and is not
// reported: the driver trusts its cached run_id for a grant only while no
// connection was dialled since it read it (every request travels on a
// connection, and a connection talks to one server process), and reads it
// again otherwise, which costs one INFO after a reconnection. Limit: a
// restart that keeps the data within microseconds after a grant can make the
// lock look granted by the new server; the lock itself survived in the data.
//
// A driver that holds a lock keeps one pub/sub connection (its inbox, see
// Waiting). When that connection breaks (the server crashed, restarted, or
// failed over), the driver subscribes again, every 10–100ms while the server
// is away, and as soon as it is back checks every held lock (key and run_id)
// and reports the lost ones through Request.Lost, without waiting for the
// next refresh (a third of the TTL). Measured by
// TestCrashIsReportedWhenTheServerReturns on a 2-core machine: Lost() closes
// 16–140ms after a SIGKILL followed by a restart without data, and about
// 100ms after a graceful restart that keeps the data (both including the
// server's own restart), where the next refresh would have been 10s after
// the grant with a 30s TTL. A user whose ACL forbids SUBSCRIBE, or a server
// that stays away, leaves the loss to the refreshes and the validity
// deadline.
//
// Automatic refresh of many locks is batched: RefreshBatch sends one pipeline
// (one round trip per node in a Cluster) in which one refresh.lua call
// checks and extends up to 256 exclusive locks with one GETEX each, which
// extends the key and returns its owner to compare (a shaped hold is one
// shapedrefresh.lua call of its own). In a Cluster a script's keys must
// share a slot, so the locks are grouped by slot: locks spread over many
// slots get about one call each. None of the Redis versions this driver
// supports checks the owner and extends in one command (SET ... IFEQ
// arrives with Redis 8.4 and Valkey 8.1); GET then PEXPIRE costs the server
// about 1.6 times GETEX's time per lock. GETEX's price: a refresh that finds
// another owner in the key (the lock was already lost) has extended that
// owner's key to its TTL, once; it never lets in a second holder (every
// holder counts its validity from its own requests), it only keeps others
// out up to one TTL longer should that owner die holding. 10,000 locks with
// a TTL of 3s, refreshed every second by package lock, cost the server about
// 10,000 commands a second (BenchmarkHeldLocks).
//
// The cause of a loss (lock.Err and Do's context.Cause match it):
//
//   - lock.ErrServerChanged: the server that granted the lock was restarted
//     or replaced (its run_id changed), or the key is missing from the server
//     that now serves it;
//   - lock.ErrTakenOver: the key holds another owner;
//   - lock.ErrExpired: the key (or the shared hold or permit) is gone, as
//     when it expired, or no refresh was confirmed within the TTL (package
//     lock);
//   - lock.ErrForceReleased: ForceRelease evicted it.
//
// # Errors
//
// Failures that may pass are marked with driver.ErrUnavailable, so that
// package lock retries them within the caller's context: connection errors
// and timeouts, and the server answers LOADING, TRYAGAIN, CLUSTERDOWN,
// MASTERDOWN, READONLY (an old primary after a failover), BUSY and
// NOREPLICAS. Every other answer is permanent and fails the call at once:
// NOAUTH, WRONGPASS, NOPERM, WRONGTYPE, ErrWrongType, ErrForeignData. The
// driver makes one attempt per call; a waiting Acquire that meets an error
// keeps its place in the queue for package lock's retry with the same owner.
//
// # Logging
//
// The driver prints nothing. go-redis v9 writes its own lines (a failed dial,
// a broken pub/sub connection) to stderr through one process-wide logger;
// this package's init replaces go-redis's default logger with one that
// routes them (before any code of the program that imports it runs).
//
// Given a logger by a Locker (lock.WithLogger; the driver implements
// driver.LoggerUser), the driver logs there, with the attribute
// client=go-redis: a failed dial to a server at Warn, once per run of
// failures to that address, with the address and the error, and the first
// dial that succeeds after it at Info; and the lines go-redis prints with
// the context of one of the driver's calls (a dropped pub/sub message or a
// new primary at Warn, a failure it will retry at Info, the rest at Debug).
// go-redis prints some lines with a context of its own, which cannot be told
// apart by driver: those are dropped, as every line is without a logger.
// With a client given to New, the failed dials are seen on a *redis.Client
// and on the nodes a *redis.ClusterClient creates after New (see
// countDials).
//
// A program that wants all of go-redis's lines sets its own logger with
// redis.SetLogger in main, or in the init of a package that imports this
// one, and keeps it; the driver then logs only the failed dials.
//
// # Close
//
// Close of a driver opened from a URL returns within about a second even on
// a server that stopped answering (SIGSTOP): waiters leave their queues if
// they can within a second, then the client is closed, which ends every round
// trip in flight and go-redis's own dials. One goroutine may outlive Close by
// up to a second: after 10 × GOMAXPROCS failed dials in a row, go-redis probes
// the server once a second in the background and sees the closed client only
// after its sleep. With a
// client given to New, which Close leaves open, a round trip in flight ends
// at its deadline (the client's read timeout; a second for the driver's own
// background checks).
//
// # Requirements
//
// Redis 6.2 or later, or any Valkey (the scripts use SET with GET and KEEPTTL).
// A user limited by ACLs needs, for the prefix P: keys ~P:*, channels
// &P:inbox:* (and for Watch &P:{*}:watch, and outside a Cluster
// &__redis__:invalidate with the commands CLIENT|ID and CLIENT|TRACKING),
// and the commands EVALSHA, EVAL, INFO, PING and SUBSCRIBE, plus those the
// scripts call (and, without fencing, TryAcquire sends SET, and in a
// Cluster HGET and PUBLISH, itself): SET, GET, GETEX, DEL,
// EXISTS, TYPE, TIME, PTTL, PEXPIRE, PEXPIREAT, PUBLISH, LLEN, LINDEX, LRANGE,
// LPOP, RPUSH, LREM, HGET, HSET, HDEL, HEXISTS, ZADD, ZREM, ZSCORE, ZCARD,
// ZRANGE, ZRANGEBYSCORE and ZREMRANGEBYSCORE (and CLIENT SETNAME with the
// client_name parameter, SCAN for List). A missing permission fails with the
// server's NOPERM error (inside a script Redis 7.0 says "can't run this
// command"), which a refresh and a release report as such, never as the lock
// lost or not held; a missing one of Watch's makes Observe look every 250ms
// instead.
//
// # Limits
//
// Package lock counts a lock valid until Grant.Start + TTL − drift (drift =
// TTL/100 + 2ms; Start is taken before the request is sent), and the server
// expires the key TTL after it ran the SET, which is later: another client can
// be granted the lock only after that, so the holder's Lost() closes at least
// the drift before (302ms with a 30s TTL), provided the two clocks' rates
// differ by less than 1%. That margin is all there is against a holder's
// process pausing or its messages being delayed.
//
// A Redis without persistence that crashes or restarts forgets every lock at
// once: another client can take a lock at once, while its holder learns of
// the loss only when its pub/sub connection is back (see Lost locks, tens of
// milliseconds after the server returns) or at its next refresh. For that
// window two clients may both believe they hold the lock; fencing tokens
// still increase (see Fencing), so a resource that checks them rejects the
// stale holder. Run Redis with appendonly yes and appendfsync always, or
// delay its return by the longest TTL in use, where that window matters.
//
// Redis replication is asynchronous: a failover to a replica that had not
// received a grant can give the lock to a second holder before the first learns
// that it lost it (at its next refresh). Fencing tokens keep increasing across
// such a failover, so a resource that checks them rejects the stale holder. In a
// Cluster, moving a slot to another primary (resharding) also counts as a loss.
// Keys of locks must not be evicted: run the server with a noeviction (or
// volatile-* without other volatile keys) maxmemory policy. A lock deleted by
// hand, or by a client that does not run release.lua, wakes no waiter: they find
// it free when they next look (within a third of their lease). go-redis ends
// a command blocked on a server that stopped answering only at a deadline: a
// cancelled context takes effect after the client's read timeout
// (read_timeout, 5s by default in go-redis v9.22) on such a server, and at
// once otherwise (Open and Close excepted, see above). The read timeout also
// bounds one TryAcquire, Refresh or Release whatever its context allows, the
// client's own retries included: against a server that accepts connections
// and answers nothing, the call fails with driver.ErrUnavailable after
// read_timeout (go-redis's retry of a timed-out command used to add a second
// one). A waiting Acquire is bounded by its context alone.
package redisdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
)

// DefaultPrefix is the namespace of every key when no prefix is given.
const DefaultPrefix = "distlock"

// fenceKeep is how long a fence record outlives its grant's TTL. Tokens do not
// depend on it (see Fencing in the package documentation); it bounds the memory
// of keys no longer used.
const fenceKeep = 24 * time.Hour

// maxTTL is the longest TTL the driver carries: no TTL a time.Duration can
// hold overflows on its way to the server (see Capabilities in the package
// documentation). Package lock accepts less, Capabilities.MaxTTL.
const maxTTL = time.Duration(math.MaxInt64)

// minLease is the shortest time a waiter keeps its place in a queue without
// renewing it.
const minLease = time.Second

// abandonTimeout bounds the cleanup of a waiter that gives up (and so how
// long a cancelled Acquire, or Close, waits for a server that stopped
// answering), and the release of a lock found on a changed server.
const abandonTimeout = time.Second

var (
	// ErrWrongType is returned (wrapped) by TryAcquire and Acquire when the lock's
	// key holds a value that is not a string, so it is not a lock of this driver
	// or of the standard SET NX pattern. The value is left untouched.
	ErrWrongType = errors.New("redisdriver: the lock's key holds a value that is not a string (not a lock); it was left untouched")

	// ErrForeignData is returned (wrapped) by TryAcquire and Acquire when one of
	// the driver's own keys of a lock (fence, queue, waiters) holds data of
	// another type. It is left untouched.
	ErrForeignData = errors.New("redisdriver: a key in the driver's namespace holds foreign data")

	// ErrServerChanged is returned by Refresh (wrapped together with
	// driver.ErrNotHeld and lock.ErrServerChanged) and passed to
	// Request.Lost when the server holding a lock was restarted or replaced
	// since the lock was granted (its run_id changed).
	ErrServerChanged = errors.New("redisdriver: the Redis server holding the lock was restarted or replaced (run_id changed)")
)

// Option configures a Driver made with New.
type Option func(*options)

type options struct {
	prefix  string // escaped
	owned   bool   // Close closes the client
	fencing bool
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

// WithFencing(false) gives up fencing tokens for a lighter acquire: see
// Without fencing in the package documentation (the URL parameter
// fencing=false). Fencing is on by default.
func WithFencing(on bool) Option { return func(o *options) { o.fencing = on } }

// withOwnedClient makes Close close the client (for drivers made from a URL).
func withOwnedClient() Option { return func(o *options) { o.owned = true } }

// Driver locks keys on a Redis or Valkey server, a Sentinel-managed primary or
// a Cluster. Use it through lock.New or lock.Open; its methods implement
// driver.Driver, driver.Acquirer and driver.BatchRefresher, and (see
// Inspection, eviction and leader election) driver.Inspector,
// driver.Lister, driver.Evictor, driver.Labeler and driver.Watcher.
type Driver struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // client, when it is one
	owned   bool                 // Close closes client
	fencing bool                 // see WithFencing
	prefix  string               // escaped
	inbox   string               // this driver's pub/sub channel

	// attemptTimeout bounds one TryAcquire, Refresh or Release: the
	// client's read timeout (attempt.go).
	attemptTimeout time.Duration

	epoch  time.Time          // the origin of since
	ctx    context.Context    // cancelled by Close: ends waiting and background work
	cancel context.CancelFunc //
	calls  sync.WaitGroup     // Acquire calls in flight
	wg     sync.WaitGroup     // the inbox reader and its checks

	dialWatch      *redisproto.DialWatch // counts dials (see grantedBy); ends them at Close; logs failed ones
	logs           redisproto.LogSink    // the Locker's logger (UseLogger)
	countedClients sync.Map              // *redis.Client whose dials are counted -> true

	mu      sync.Mutex
	closed  bool
	held    map[*driver.Request]heldLock // granted locks: where, and their fence record's due time
	nodes   []node                       // the nodes of held locks, by index (see heldLock)
	nodeIDs map[node]uint32              // index of each node in nodes
	waiters map[string]*waiter           // waiting Acquire calls by owner
	runIDs  map[string]seenID            // last run_id seen, by node address ("" outside a cluster)
	sub     subscription
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
	_ driver.LoggerUser     = (*Driver)(nil)
)

// New returns a Driver that locks with client, which the caller keeps and
// closes after the Driver. client may be a *redis.Client (standalone or from
// redis.NewFailoverClient) or a *redis.ClusterClient; a *redis.Ring is refused.
// For timely loss detection the client should honour context deadlines
// (redis.Options.ContextTimeoutEnabled).
func New(client redis.UniversalClient, opts ...Option) (*Driver, error) {
	if client == nil {
		return nil, errors.New("redisdriver: nil client")
	}
	if _, ok := client.(*redis.Ring); ok {
		return nil, fmt.Errorf("%w: redisdriver: a *redis.Ring spreads keys and pub/sub channels over independent servers; use a *redis.Client or *redis.ClusterClient", driver.ErrUnsupported)
	}
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("redisdriver: %w", err)
	}
	d := &Driver{
		client:  client,
		held:    map[*driver.Request]heldLock{},
		nodeIDs: map[node]uint32{},
		waiters: map[string]*waiter{},
		runIDs:  map[string]seenID{},
	}
	d.cluster, _ = client.(*redis.ClusterClient)
	d.attemptTimeout = attemptTimeout(client)
	o := options{prefix: DefaultPrefix, fencing: true}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	d.prefix, d.owned, d.fencing = o.prefix, o.owned, o.fencing
	d.dialWatch = redisproto.NewDialWatch(d.owned, &d.logs)
	d.countDials(client)
	d.inbox = d.prefix + ":inbox:" + hex.EncodeToString(id[:])
	d.sub.resub = make(chan struct{})
	d.ctx, d.cancel = context.WithCancel(redisproto.WithLogSink(context.Background(), &d.logs))
	d.epoch = time.Now()
	return d, nil
}

// UseLogger implements driver.LoggerUser: see Logging in the package
// documentation.
func (d *Driver) UseLogger(l *slog.Logger) { d.logs.Set(l) }

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fencing: d.fencing, Expiring: true, Notify: true, FIFO: true,
		Shared: true, WriterPreference: true, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: min(maxTTL, driver.DefaultMaxTTL),
	}
}

// usable returns ErrClosed after Close, or ctx's error.
func (d *Driver) usable(ctx context.Context) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return driver.ErrClosed
	}
	return ctx.Err()
}

// Close stops the driver's pub/sub reader and, for a driver opened from a URL,
// closes its client. Waiting Acquire calls give up their place and return
// driver.ErrClosed. Locks still held stay until their TTL ends. A driver
// opened from a URL closes within about abandonTimeout (a second) even when
// the server stopped answering; with a client given to New, which Close does
// not close, a round trip in flight ends at its deadline (the client's read
// timeout, or the driver's own bounds of a second for its background work).
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.cancel() // interrupts waiting Acquire calls and background checks
	var err error
	if d.owned {
		// Waiters leave their queues while the client is open; those that
		// cannot within abandonTimeout (the server stopped answering) are cut
		// off: closing the client closes its connections, which ends every
		// round trip in flight at once, the background work's too.
		waited := make(chan struct{})
		go func() {
			d.calls.Wait()
			close(waited)
		}()
		t := time.NewTimer(abandonTimeout)
		select {
		case <-waited:
		case <-t.C:
		}
		t.Stop()
		err = d.client.Close()
	}
	d.calls.Wait()
	d.mu.Lock()
	ps := d.sub.ps
	d.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	d.wg.Wait()
	d.dialWatch.Close() // go-redis's own dial goroutines, for an owned client
	return err
}

// heldLock is what the driver keeps for each lock it holds, kept small
// because a process may hold many: the node that granted it, as an index in
// Driver.nodes (the nodes a process meets are few: one per server, and one
// more per restart or failover seen), and when its refresh must next extend
// the fence record (see fenceDue in refresh.go).
type heldLock struct {
	fenceUntil int32 // the fence record's expiry at the earliest, in whole seconds by since; 0: unknown; noRecord: none to keep
	node       uint32
}

// noRecord is heldLock.fenceUntil for a lock whose value carries its label
// (taken without fencing, see tryPlain): the fence key holds no record of
// it, so its refresh never extends the fence key.
const noRecord = -1

// fenceExpiry is h's fenceUntil as a time by since.
func (h heldLock) fenceExpiry() time.Duration { return time.Duration(h.fenceUntil) * time.Second }

// since is the driver's monotonic clock, for heldLock.fenceUntil.
func (d *Driver) since() time.Duration { return time.Since(d.epoch) }

// nodeID returns n's index in d.nodes, adding it; d.mu is held.
func (d *Driver) nodeID(n node) uint32 {
	id, ok := d.nodeIDs[n]
	if !ok {
		id = uint32(len(d.nodes))
		d.nodes = append(d.nodes, n)
		d.nodeIDs[n] = id
	}
	return id
}

// heldNode returns the node that granted req, if req is held.
func (d *Driver) heldNode(req *driver.Request) (node, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.held[req]
	if !ok {
		return node{}, false
	}
	return d.nodes[h.node], true
}

// record remembers a granted lock and the server that holds it. Its fence
// record is extended at its first refresh (its expiry is not known: a grant
// keeps the expiry of a record it finds), unless the lock's value carries
// its label (plain) and the fence key no record of it.
// The first lock held starts the inbox (see watch).
func (d *Driver) record(req *driver.Request, n node, plain bool) {
	h := heldLock{}
	if plain {
		h.fenceUntil = noRecord
	}
	d.mu.Lock()
	h.node = d.nodeID(n)
	d.held[req] = h
	start := !d.sub.watched && !d.closed
	if start {
		d.sub.watched = true
		d.wg.Add(1)
	}
	d.mu.Unlock()
	if start {
		go d.watch()
	}
}

func (d *Driver) forget(req *driver.Request) {
	d.mu.Lock()
	delete(d.held, req)
	d.mu.Unlock()
}

var millis = redisproto.Millis

// classify marks a transient failure with driver.ErrUnavailable (see Errors
// in the package documentation).
var classify = redisproto.Classify
