// Package pgadvisory is the distlock driver for PostgreSQL session advisory
// locks. Programs that already run PostgreSQL need no other server, and the
// driver does not take their connection pool: locks live on a few dedicated
// connections of their own.
//
//	import _ "github.com/distlock/lock/pgadvisory"
//
//	locker, err := lock.Open(ctx, "postgres://app@db.example.com/app?sslmode=verify-full")
//
// A key is locked with pg_try_advisory_lock / pg_advisory_lock on the bigint
// LockID(prefix, key) and released with pg_advisory_unlock, whose false result
// (the session did not hold it) is reported as lock.ErrNotHeld. The locks are
// session-level: they belong to one database session and live until released
// or until that session ends. A dropped connection, a killed backend or a server
// restart therefore releases them at once on the server, and the driver reports
// every lock of that session lost.
//
// # URL format
//
//	postgres://user:password@host:5432/dbname?sslmode=verify-full
//	postgresql://host/dbname?prefix=billing&ttl=10s
//	postgres:///dbname?host=/var/run/postgresql        (Unix socket)
//	postgres://h1:5432,h2:5432/db?target_session_attrs=read-write
//	postgres://host/db?max_lock_conns=4&locks_per_conn=500
//	postgres://host/db?fence_sequence=locks.fence&fence_create=false
//	postgres://host/db?fencing=false
//
// The URL is parsed by pgxpool.ParseConfig, so every libpq connection parameter
// works (sslmode, sslrootcert, sslcert, sslkey, connect_timeout (default 10s
// here), target_session_attrs, service, ...), as do pgxpool's pool_*
// parameters (read and ignored: the driver opens its own connections), the
// PG* environment variables and ~/.pgpass. Any other parameter is sent to the
// server as a session setting (search_path=app), and the server refuses names it
// does not know. The portable parameters (ttl, auto_refresh, prefix,
// open_timeout, close_timeout) are read by package lock and never reach
// PostgreSQL. The driver's own parameters, removed before pgx sees the URL:
//
//   - max_lock_conns (default 10, at least 2): the most dedicated lock
//     connections the driver opens (WithMaxConns).
//   - locks_per_conn (default 2000): the soft limit of locks on one
//     connection before another is opened (WithLocksPerConn).
//   - fencing (default true): false turns fencing tokens off, so the driver
//     needs no sequence at all (WithFencing).
//   - fence_sequence (default <prefix>_fence): the sequence tokens come from,
//     optionally schema-qualified (WithFenceSequence).
//   - fence_create (default true): false never runs CREATE SEQUENCE; a missing
//     sequence is then an error naming the statement to run (WithFenceCreate).
//   - holders (default false): true writes a row per hold into the holders
//     table, which inspection, eviction and leader election read
//     (WithHolders; see Inspection, eviction and leader election).
//
// Users who already have a *pgxpool.Pool use New instead of a URL.
//
// # Capabilities
//
//   - Fencing: yes; tokens come from one sequence (nextval, in the same
//     statement that takes the lock), so they increase across holders, clients
//     and server restarts. Off with fencing=false.
//   - Expiring: no; a lock lives as long as its session, and the TTL only bounds
//     how long the lock is trusted without a confirmed ping of that session.
//   - Notify: yes; a waiter sits in PostgreSQL's own lock queue (a blocking
//     pg_advisory_lock) and is granted the lock by the server the moment it is
//     released, within one round trip.
//   - FIFO: yes for exclusive and shared locks; PostgreSQL grants a lock to its
//     queued waiters in arrival order, and a new request queues behind existing
//     waiters rather than barging in. Permit waiters are not ordered (see
//     Read-write locks and semaphores).
//   - Shared: yes; shared locks are pg_advisory_lock_shared on the same id.
//   - WriterPreference: yes; PostgreSQL's own lock queue holds back shared
//     requests that arrive after a waiting exclusive one (the exact rule and
//     its exceptions are under Read-write locks and semaphores).
//   - Permits: yes; a semaphore of n is n advisory locks; a mismatched n, or a
//     semaphore used as a lock, is driver.ErrInvalidArgument where the driver
//     sees it (see Read-write locks and semaphores).
//   - MinTTL and MaxTTL: 10ms and 366 days (driver.FloorTTL and
//     driver.DefaultMaxTTL), package lock's range: the TTL bounds how long a lock is trusted without a confirmed refresh.
//
// # Read-write locks and semaphores
//
// A shared lock (lock.WithShared) is pg_advisory_lock_shared, or
// pg_try_advisory_lock_shared, on the key's LockID, the id of the exclusive
// lock, and is released with pg_advisory_unlock_shared: SQL clients taking
// that id in either mode take part in the same read-write lock.
//
// The queueing rule is PostgreSQL's (src/backend/storage/lmgr/lock.c,
// LockAcquireExtended, and proc.c, ProcSleep (JoinWaitQueue from PostgreSQL 18)
// and ProcLockWakeup): a request from a session that does not already hold the id
// conflicts if its mode conflicts with the mode of any request already
// waiting for the id (the lock's waitMask) or with any mode held; a
// conflicting request joins the tail of the id's queue (the try variants
// return false instead), and a release grants the queued requests from the
// head, each one that conflicts neither with what is held nor with a request
// still waiting ahead of it. For the driver's requests that means:
//
//   - an exclusive request is granted when nothing is held and no request
//     waits ahead of it;
//   - a shared request is granted when no exclusive lock is held and no
//     exclusive request waits ahead of it (shared requests ahead of it do not
//     hold it back);
//   - a request that is not queued (TryAcquire, and Acquire's first try)
//     counts as arriving after every queued one: pg_try_advisory_lock_shared
//     is false while an exclusive request waits, even when only readers hold
//     the key.
//
// So once a writer waits, readers that arrive after it wait behind it, and
// readers that hold the key or were queued before it keep their turn; a
// release of the writer grants every reader queued up to the next writer at
// once. A stream of overlapping readers delays a writer by the readers ahead
// of it only: WriterIsNotStarvedByAStreamOfReaders measures 24 to 28 ms at
// worst, for a 1 s and a 3 s stream alike, on the development machine
// (TestServerQueuesSharedRequestsBehindAWaitingExclusiveOne shows the server's
// rule with plain SQL sessions, TestReadersArrivingAfterAWaitingWriterGoAfterIt
// the driver's). Exceptions:
//
//   - PostgreSQL grants a session an id it already holds whatever waits, and
//     queues a session that holds a mode conflicting with a waiter ahead of
//     that waiter (deadlock avoidance in ProcSleep). The driver never requests
//     an id on a session that holds it (see Connections), so neither applies
//     to its requests; an SQL client that takes an id twice in one session
//     may pass a waiting writer.
//   - An Acquire that finds no connection to wait on (max_lock_conns-1 wait
//     already) is not queued: it tries and, refused, retries after its
//     backoff. Such a writer holds no reader back and may wait as long as the
//     stream of readers lasts. Give max_lock_conns room for the waits of one
//     Driver.
//
// A semaphore of n permits (lock.WithPermits(n), n >= 2) is n advisory locks,
// its slots, with ids PermitID(prefix, key, i) for i = 0 .. n-1; a permit is
// one slot held exclusively (pg_advisory_lock) by one session, so it is held,
// refreshed, released and lost exactly as a mutex, on few shared connections,
// and an SQL client holding a slot's id holds a permit. The slot ids are
// hashed apart from every LockID, so the semaphore of a key and the lock of
// the same key are distinct advisory locks. A permit request tries the slots
// one by one (one round trip each), starting at a slot that turns with every
// request so that concurrent requests spread over the slots. If all are held,
// TryAcquire returns lock.ErrLocked. Acquire then waits in the server's queue
// of one slot, on a connection of its own like a mutex wait, and is granted
// that slot by the server with its release, ahead of any request not yet
// queued. A permit given back on another slot and left free (nobody queued
// on it) reaches it too, without polling: the driver's unlock of a permit
// announces the slot in the same statement
// (pg_notify('distlock_permits', '<slot id>')) if, right after the unlock,
// the slot can be taken (and then lets it go again, in the same statement):
// a slot the unlock granted to a queued request is not announced. One extra
// session per Driver, opened by its first waiting permit request, LISTENs on
// that channel and tells one waiter of that Driver queued on another slot of
// that semaphore, the one that began waiting first (and that is not already
// trying an announced slot). That waiter tries the announced slot on another
// connection while it stays queued, and cancels its queued wait only if it
// took the slot (a cancel request costs the server a process start): so a
// permit given back wakes at most one waiter per client, none if it went to
// a queued request. A slot freed without an announcement (its holder's
// session ended, an SQL client unlocked it, or the announcement failed at
// commit, after the unlock, as with a full NOTIFY queue: the release then
// settles with a plain unlock and succeeds) is found by the waiters' rescan,
// every second (every 100 ms until the listening session is in force, or
// after it failed and before another one is). The rule for permits: a permit
// given back goes first to the requests queued on its slot, in arrival
// order; a slot left free goes to the request that takes it first, which
// may be a new request (the first look of an Acquire, or a TryAcquire) or a
// waiter of another slot that heard of it. There is no order across slots.
// For the length of the unlock statement of a permit left free, a try by
// another session may find the slot held, as it would have a moment before.
//
// Every grant of any shape draws its token from the one fencing sequence (see
// Fencing), so tokens increase across shared, exclusive and permit grants on
// a key, and across keys.
//
// All users of a semaphore must give the same n. A mismatch is
// driver.ErrInvalidArgument (and changes nothing) when it is seen:
//
//   - in one Driver, always: permits of another n, or permits on a key held
//     as a lock, or a lock (exclusive or shared) on a key held as a semaphore;
//   - across clients, when a permit request finds every one of its n slots
//     held: it then reads pg_locks (two statements, only then, and not again
//     for a second per key and Driver once they found nothing) for slot n,
//     one beyond its last (held or awaited by a semaphore of more permits),
//     and for the key's LockID (held or awaited as a lock). A waiting Acquire
//     looks again on each rescan that is due.
//
// Not seen: a permit request while its slots have room, a lock request on a
// key that other clients use as a semaphore, and a semaphore of fewer permits
// seen from one of more. Slot i is the same id whatever n, so mismatched
// users admit at most the largest n at once; a lock and a semaphore of one
// key never exclude each other.
//
// Limits: a full semaphore costs a request n round trips per look, and a
// permit given back and left free costs a try by one waiter per client (and
// a cancel request by the one that takes it), so semaphores are meant for
// small n and few waiters (tens); each held permit counts as a lock toward
// locks_per_conn, each waiting Acquire takes a connection as for the mutex,
// and a Driver that has had a waiting permit request keeps one more session,
// listening (with the Driver's application_name), outside max_lock_conns,
// until Close. PostgreSQL serialises the
// commits of statements that notify, so giving back a permit costs a little
// more than unlocking a mutex.
//
// # Lock ids
//
// Advisory locks are named by 64-bit ids in one space per database. The id of a
// key is LockID(prefix, key): the first 8 bytes of the SHA-256 of the UTF-8 bytes
// of prefix + "\n" + key, as a signed big-endian bigint. An operator computes it
// in psql (PostgreSQL 11 or later) with
//
//	SELECT ('x' || encode(substring(sha256(convert_to('distlock' || chr(10) || 'invoice:42', 'UTF8')) for 8), 'hex'))::bit(64)::bigint;
//
// and can take, test or inspect the same lock: pg_try_advisory_lock(<that id>)
// returns false while the driver holds it, and pg_locks shows it with
// locktype 'advisory', classid the high and objid the low 32 bits, objsubid 1.
// A key a text value cannot hold (one with a NUL byte, or characters outside the
// database encoding) is hashed as bytes instead:
//
//	sha256(convert_to('distlock' || chr(10), 'UTF8') || '\x6b6579'::bytea)
//
// Two distinct keys share an id only by a 64-bit SHA-256 collision (about 2^-64
// per pair, and nobody can choose keys to force one). A collision adds waiting,
// never a second holder: the driver treats the two keys as one lock, also
// inside one process.
//
// # Connections
//
// A session lock belongs to the connection that took it, so the driver opens
// connections of its own for locks, with the pool's configuration (and its
// BeforeConnect and AfterConnect hooks) but outside the pool: the pool stays
// whole for the program's queries. Many locks share one connection: a
// lock costs a map entry, not a connection or a goroutine, and a new connection
// is opened only when the existing ones are busy or hold locks_per_conn locks
// each, up to max_lock_conns. Holding 10,000 locks takes five connections.
//
// The soft limit is there because PostgreSQL walks all the locks a session
// holds at the end of each of its statements, about 0.1µs per lock on the
// development machine: a session holding 2,000 locks adds about 0.2 ms to every
// statement it runs, 10,000 about 1 ms. Lower locks_per_conn trades connections
// for faster statements.
//
// PostgreSQL counts session locks: a session that takes a lock it already holds
// gets it again. The driver therefore never sends a lock request for an id on a
// connection that holds that id, and answers a TryAcquire of an id held by
// another owner in the same process with lock.ErrLocked without a round trip.
//
// A blocking Acquire first tries the key on a shared connection, like
// TryAcquire; if it is held (or was found held within the last second, when the
// try is skipped) Acquire waits in PostgreSQL's queue on a connection of its own,
// one that holds nothing, which then holds the lock. A cancelled wait is ended
// with the server's cancel request, and the connection is cleared
// (pg_advisory_unlock_all) before Acquire returns, so a lock granted just as the
// wait was cancelled is not left behind (a server that does not do this within
// 50 ms is left to do it in the background: see Errors and deadlines). At most
// max_lock_conns-1 connections
// wait at once; further waiters (and a holder that needs one more lock while
// all are taken) make one attempt without a queue place and, finding the key
// held, are answered lock.ErrLocked, which the portable layer's Acquire tries
// again after its backoff (WithBackoff): a burst of waiters cannot exhaust the
// server's connections or deadlock the process, at the price of FIFO order for
// those waiters.
//
// Lock connections are tagged with an application_name unique to the Driver
// (ApplicationName), so they can be found in pg_stat_activity. Their session
// settings are adjusted for holding locks: statement_timeout, lock_timeout,
// idle_in_transaction_session_timeout and idle_session_timeout are 0 (a
// timeout would end a wait or the session); unless the URL sets them,
// tcp_keepalives_idle=10, tcp_keepalives_interval=5, tcp_keepalives_count=3,
// tcp_user_timeout=30000 and client_connection_check_interval=5000, so the server
// drops the session (and its locks) of a client that vanished from the network
// within about half a minute instead of hours; synchronous_commit is turned back
// on where it was off.
//
// # Lost locks
//
// A server crash or restart (or pg_terminate_backend) ends the sessions, and the
// server forgets their locks at once: another client may take them the next
// moment. The driver watches the socket of every lock connection for the
// server's close (Linux, epoll; one goroutine per Driver, woken by nothing
// else), and reports every lock of a closed session lost as soon as the kernel
// sees the close, not at the next refresh (TTL/3): on the development machine
// about 2 ms after pg_terminate_backend is sent, and within 0.1 ms of the last
// process of a killed server being gone. Elsewhere than on Linux, the refresh
// below finds the loss within the TTL, when another client may already hold
// the lock. A server that goes silent without closing (frozen, or cut off by
// the network) is found by the refresh too: a frozen server grants no lock
// meanwhile, and one cut off drops a silent session only after its
// tcp_user_timeout (30 s, below), so with a TTL of at most 30 s Lost closes
// first; with a longer TTL a cut-off holder may learn it after another client
// took the lock.
//
// A lock here cannot expire, so the TTL does not bound how long it lives; it
// bounds how long the lock is trusted without a confirmed check of its session
// (turning automatic refresh off is not supported). Each refresh pings the
// connection that holds the lock: one round trip per connection, however many
// locks it holds, and refreshes due together share it. A connection that
// fails, does not answer within its deadline (plus a second of grace), or
// answers from a different backend is closed, and every lock it held is
// reported lost, so a terminated backend, a server crash or a network cut is
// noticed within the TTL even when the socket goes silent. When a new
// connection finds that the server's start time changed (a restart, or a
// failover to another server behind the same address), every older connection
// is given up and its locks reported lost too, and a standby
// (pg_is_in_recovery) is refused. A lock taken by waiting counts as confirmed
// one round trip before its grant arrived.
//
// The cause of a loss (lock.Err and Do's context.Cause match it):
//
//   - lock.ErrSessionExpired: the lock's session ended (closed by the server,
//     as on pg_terminate_backend or a restart, failed, or did not answer a
//     second past its call's context; a refresh's context ends at the
//     earliest validity deadline of its batch, so a lock cut off from its
//     server, or on a frozen one, reports lock.ErrExpired first unless a
//     lock refreshed with it expires over a second sooner);
//   - lock.ErrServerChanged: a new connection found the server's start time
//     changed before the old session was seen to end (a failover behind the
//     same address while the old server lives on; a restart closes the
//     sessions first);
//   - lock.ErrForceReleased: ForceRelease terminated or unlocked it;
//   - lock.ErrExpired (from package lock): no refresh was confirmed within
//     the TTL.
//
// # Errors and deadlines
//
// The driver makes one attempt at each call and reports. Failures a later
// attempt may not meet match lock.ErrUnavailable (driver.ErrUnavailable): the
// server unreachable, a connection refused, reset or timed out, SQLSTATE class
// 08, 57P01 admin_shutdown, 57P02, 57P03 cannot_connect_now, 53300
// too_many_connections, 57014, 40001 and 40P01; the portable Acquire retries
// them until its context ends, so a waiter outlives a server restart shorter
// than its context. Everything else is permanent and fails at once:
// authentication (28xxx), permission (42501), a missing database (3D000), an
// unknown setting, an unusable fencing sequence, a standby, a transaction
// pooler.
//
// lock.Open connects (dial, TLS, authentication, session setup) within its
// context, so a wrong password fails there, redacted; each attempt to open a session is
// also bounded by connect_timeout (default 10s, where pgx would wait about two
// minutes for a server whose SYNs are dropped).
//
// connect_timeout also bounds one TryAcquire or Release whatever its context
// allows: against a server that accepts connections and answers nothing
// (frozen: the kernel acknowledges, TCP keepalives pass) such a call fails
// with driver.ErrUnavailable after connect_timeout, where it used to wait for
// ever. A waiting Acquire is bounded by its context alone, and Refresh by the
// deadline package lock always gives it.
//
// Every call returns when its context ends, whatever the server does: Refresh
// and Release at once (within a millisecond or two against a frozen server on
// the development machine), TryAcquire and Acquire after giving the server at
// most 50 ms more to settle what they started. A call that finds its session
// busy with another lock's statement waits for it only while its context
// lasts, and sends nothing if it ends. A statement on a lock session cannot be
// cancelled on the server (the cancel could end a statement of another lock
// on the same session), so one still unanswered when its caller returns goes
// on in the background, owned by the driver. If it is answered,
// its outcome goes into the driver's books (a lock granted to an acquire that
// has returned is given back at once; a wait is cancelled and its session
// cleared); if it is not answered a second after its context ended, its
// session is given up and every lock on it reported lost. A Release that
// returned that way (its error matches lock.ErrUnavailable and the context's
// error) leaves the lock held in the books until the unlock is answered; a
// later Release of the lock waits for that answer and reports it, nil if the
// lock was freed, without sending a second unlock (which could free the same
// lock, taken since by another owner on that session). Close never waits on a
// server that does not answer: it cancels waits on the server, gives that at
// most half a second, then closes every socket the driver opened, which ends
// the statements left in flight (200 ms with a frozen server on the
// development machine).
//
// # Fencing
//
// Tokens come from a sequence, by default <prefix>_fence in the first schema of
// the search_path, created on first use with CREATE SEQUENCE IF NOT EXISTS. It
// must have CACHE 1, a positive increment and NO CYCLE (the driver checks), and
// the user needs USAGE on it. Users without the right to create it ask a
// privileged user to run, once,
//
//	CREATE SEQUENCE distlock_fence; GRANT USAGE ON SEQUENCE distlock_fence TO app;
//
// and open with fence_create=false; or they turn fencing off. One sequence for
// all keys makes tokens increase across keys too, which is more than the
// promise. Drawing a token costs no transaction id in 31 of 32 locks
// (PostgreSQL logs sequences 32 values ahead and spends an xid only on that log
// record) and no table row, so locking at a high rate neither churns dead tuples
// nor hastens xid wraparound. Never drop or reset the sequence: its values would
// start again at 1.
//
// # Inspection, eviction and leader election
//
// An advisory lock records nothing but its id, so what the driver can tell
// about a key depends on one choice, holders=true (WithHolders):
//
// Without it (the default) the driver writes nothing beside its locks and the
// mutex costs what it always did. Inspect reads pg_locks (on an auxiliary
// session, below) for the key's LockID
// and for PermitID slots 0..63: the holders (granted entries: how many, shared
// or not) and the waiters (entries not granted) are exact, as the server sees
// them at that moment, SQL clients included; but a holder is named only by its
// session, as the label "postgres pid <pid>" (which Info.Owner shows), with no
// token (Info.Token 0) and no Since, and the number of permits of a semaphore
// is the count of slots seen in use (at least 2). List, Relabel and
// ForceRelease return lock.ErrUnsupported saying that they need holders=true.
// Leader election publishes its value in the label, so Campaign and Resign
// work but Proclaim is unsupported, and Leader and Observe report a leader
// with no value, term or start, named "postgres pid <pid>". An operator can still free a lock by hand with pg_terminate_backend
// of the holding session (Lock ids shows how to find it), which also ends
// every other lock on that session.
//
// With holders=true the driver keeps the table <prefix>_holders (created on
// first use with CREATE UNLOGGED TABLE IF NOT EXISTS; a user without the
// right gets an error naming the statement and the GRANT a privileged user
// runs once). Each grant writes one row, keyed by (lock_id, pid): the key,
// the owner, the label, the token, the shape, the semaphore's n, and since
// (the server's clock_timestamp() at the write); each Release deletes it.
// The lock itself is unchanged, so SQL clients of the same ids still take
// part in it. A row counts only while pg_locks shows its pid holding its id:
// a row left behind by a session that ended (or an unlogged table after a
// crash, which PostgreSQL empties) is never reported. Such rows are not
// deleted until a later hold of the same id on a session with the same pid
// replaces them, so the table keeps one row per hold that was lost with its
// session; and if a later session with that pid takes the same id without
// writing a row (an SQL client), Inspect shows it with the old row's label.
// The table's name is fixed by the prefix (no schema option). So with
// holders:
//
//   - Inspect is exact for holders, shapes, waiters, owners, labels, tokens
//     and Since (the server's time of the row's write, just after the grant),
//     and Permits is the semaphore's n. Info.Token is the greatest token of
//     the current holders, 0 once the key is free. Expires is always zero
//     (session locks). A holder that wrote no row (an SQL client, a driver
//     without holders, or a grant whose row is still being written) shows as
//     "postgres pid <pid>" with token 0.
//   - List joins the table with pg_locks: the keys held by distlock drivers
//     with holders (SQL clients' locks have no key to list).
//   - Relabel rewrites the row of a hold this Driver has (ErrNotHeld
//     otherwise).
//   - ForceRelease finds the key's holders in pg_locks. Holders with a row are
//     marked evicted in it and told with NOTIFY distlock_evict
//     '<lock id> <pid>'; their driver, which LISTENs on its listening session
//     (opened by its first grant with holders, replaced 0.5 s after it ends
//     while the driver holds locks, and reading on each start the marks made
//     before it listened), unlocks that one id on its session and reports
//     the lock lost with driver.ErrForceReleased (its Release and Refresh
//     return ErrNotHeld wrapping it), leaving its other locks on the session
//     alone: about 10 ms on the development machine. A holder that has not
//     let go within 3 s has its session ended with pg_terminate_backend: a
//     driver that is frozen or cannot listen, or a driver session (told by
//     its application_name, see ApplicationName) holding the key without a
//     row (a driver without holders, or one whose row was
//     not yet written: ForceRelease reads pg_locks again every 10 ms and
//     tells a row that appears). A session that is no driver's (an SQL
//     client) is ended at once: pg_terminate_backend is the only way to free
//     another session's advisory lock. Ending a session frees every lock it
//     held (its driver reports them lost as a session loss, without
//     ErrForceReleased) and needs the right to signal it (the same role, or
//     pg_signal_backend). ForceRelease returns when the key is free of the
//     holders it found (grants made since are left alone). The next grant's
//     token comes from the fencing sequence, so it exceeds every evicted
//     holder's; an evicted holder's Release sends no unlock, so it cannot
//     free the next holder.
//
// With holders each acquire and each release costs one more statement (a
// round trip and a write), on connections of the Driver's own (auxiliary
// sessions, opened on demand, at most 4, kept until Close, also used by
// Inspect, List and ForceRelease, outside max_lock_conns, tagged with the
// Driver's application_name), and the Driver keeps its listening session
// open once it has held a lock. On the development machine an uncontended
// TryAcquire and Release take about 2.5 times as long as with holders off,
// a contended handoff about twice as long (BenchmarkUncontended and
// BenchmarkContended, impl=driver-holders). A grant whose row cannot be written is
// given back and the acquire fails. The driver does not implement
// driver.Watcher, so Observe looks every 250 ms: no server event marks an
// advisory lock's grant or release, and a NOTIFY from the driver's own row
// writes would cost every acquire and release a serialised commit yet still
// miss ended sessions and SQL clients.
//
// # Limits
//
// Session locks do not work through a transaction-pooling proxy (PgBouncer with
// pool_mode=transaction, and similar), which runs consecutive statements of one
// client connection on different server sessions. Every lock and unlock
// statement checks, inside the statement, that it runs on the session the
// connection started with; when it does not, the driver takes nothing on the
// wrong session, gives up the connection, and from then on refuses every
// acquire with ErrTransactionPooler, which names the cause and matches
// lock.ErrUnsupported. A pooler that happens to keep a client on one session
// is not detected until it moves it. Use a direct connection, or session
// pooling (which works).
//
// Lock sessions prepare the driver's statements (named distlock_*) the first
// time they need each, and then send only its arguments, in binary. A
// connection string with default_query_exec_mode=exec, describe_exec or
// simple_protocol, chosen for a proxy that cannot keep prepared statements,
// makes the driver send its statements as pgx does in that mode instead.
//
// Advisory locks are not replicated: a failover to a standby loses every lock.
// The driver reports such locks lost when their connection breaks, or when a
// new lock connection reaches a server with another start time; a connection
// taken from the pool that still leads to an old primary that stayed up does
// not see the failover. Fencing tokens keep increasing as far as the standby had
// received the sequence's log. Locks live in one database; clients must connect
// to the same one to exclude each other.
//
// Each waiting Acquire keeps a server connection busy, up to max_lock_conns-1
// per Driver; the server's max_connections must allow for them.
package pgadvisory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// ErrFenceSequence is wrapped by the error of an acquire when the fencing
// sequence is missing and may not be created, cannot be created, cannot be used,
// or is not fit to give fencing tokens.
var ErrFenceSequence = errors.New("pgadvisory: fencing sequence unusable")

// ErrTransactionPooler is wrapped by errors and loss causes when consecutive
// statements on one connection ran on different server sessions: a
// transaction-pooling proxy is between the driver and PostgreSQL, and session
// advisory locks cannot work through it. It matches driver.ErrUnsupported (and
// so lock.ErrUnsupported): the configuration is not supported, and retrying does
// not help. Once seen, every later acquire of the Driver fails with it.
var ErrTransactionPooler = fmt.Errorf("pgadvisory: statements of one connection ran on different server sessions: a transaction-pooling proxy (such as PgBouncer with pool_mode=transaction) is in between; session advisory locks need a direct connection or session pooling (%w)", driver.ErrUnsupported)

// Driver takes PostgreSQL session advisory locks. Use it through lock.New or
// lock.Open; its methods implement driver.Driver, driver.Acquirer,
// driver.BatchRefresher, driver.Inspector, driver.Lister, driver.Evictor and
// driver.Labeler (the last three, and Inspect's owners, labels and tokens,
// need WithHolders).
type Driver struct {
	cfg      *pgxpool.Config // sessions are opened with its ConnConfig and hooks
	sockets  sockets         // every connection dialed, closed by Close
	o        options
	tag      string             // application_name of the lock sessions
	settings [2][]string        // session settings of lock sessions: names, values
	lockID   func(string) int64 // LockID under the prefix; a test hook may replace it
	grace    time.Duration      // stmtGrace; a test hook may lengthen it

	stmts    atomic.Pointer[lockStatements] // set once the fencing sequence is resolved
	fenceSem chan struct{}                  // held (one token) while the sequence is resolved
	fence    uint32                         // the sequence's OID

	closing context.Context // cancelled by Close, to end waits
	stop    context.CancelFunc
	calls   kit.Calls // work in flight in the driver's goroutines (see handoff.go); closed with d.closed

	mu       sync.Mutex
	closed   bool
	conns    []*lockConn
	creating int                          // connections being opened, counted against the cap
	byOwner  map[ownerKey]*holding        // every held lock
	ids      map[int64]idUse              // held lock ids across all connections
	epoch    time.Time                    // the server's start time, seen by the first connection
	pooler   error                        // set when a transaction pooler was detected: every acquire fails
	recent   [contendedSlots]contention   // keys recently found held, waited for without a try
	changed  chan struct{}                // closed and replaced when a connection may have become usable
	sweeper  *time.Timer                  // closes connections idle too long; nil when none is due
	watch    atomic.Pointer[sessionWatch] // started with the first connection; nil before, or where there is none

	perms        map[string]permitUse       // semaphores with permits held here, by key
	permitID     func(string, int) int64    // PermitID under the prefix
	permitTurn   atomic.Uint32              // turns the first slot a permit request tries
	listener     *permitListener            // the session listening for permits given back, or nil; guarded by mu
	shapeChecked [contendedSlots]contention // semaphores recently checked for another shape (see shapeCheckDue); guarded by mu
	bellSeq      uint64                     // permit waits begun (d.mu), to tell the earliest first
	rescan       [2]time.Duration           // permitRescan and permitRescanListening; a test hook may lengthen them

	aux auxConns // holders rows, Inspect, List, ForceRelease (see holders.go)
}

type ownerKey struct{ key, owner string }

// idUse counts the holders of one lock id in this Driver.
type idUse struct{ n, exclusive int }

// holding is one held lock.
type holding struct {
	k       ownerKey
	id      int64
	shared  bool
	permits int // the semaphore's n for a permit, else 0
	c       *lockConn
	token   uint64
	start   time.Time
	lost    driver.LossReporter

	// Guarded by d.mu.
	release *pendingRelease // an unlock in flight, or nil
	// gone marks an entry kept in byOwner only to report to a later Release
	// the outcome of an unlock whose caller gave up waiting (outcome: nil if
	// it freed the lock). It is no longer in c.locks or ids; the next Release
	// or Refresh of the lock removes it.
	gone    bool
	outcome error
}

// pendingRelease is an unlock in flight; done is closed once its outcome is in
// the books.
type pendingRelease struct{ done chan struct{} }

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
	_ driver.Inspector      = (*Driver)(nil)
	_ driver.Lister         = (*Driver)(nil)
	_ driver.Evictor        = (*Driver)(nil)
	_ driver.Labeler        = (*Driver)(nil)
)

// New returns a Driver that opens its lock connections with pool's
// configuration (connection string, TLS, BeforeConnect and AfterConnect hooks)
// but outside the pool, so the pool's capacity for queries is not reduced and
// no connection of the pool ever holds a lock. Closing the Driver does not close
// the pool. New does not connect; the first lock does. It fails only for an
// invalid option.
func New(pool *pgxpool.Pool, opts ...Option) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("pgadvisory: New with a nil pool")
	}
	return newDriver(pool.Config(), defaultOptions().apply(opts))
}

// newDriver makes a Driver for cfg, which it keeps (pass a copy).
func newDriver(cfg *pgxpool.Config, o options) (*Driver, error) {
	if o.err != nil {
		return nil, o.err
	}
	params := cfg.ConnConfig.RuntimeParams
	d := &Driver{
		cfg:      cfg,
		o:        o,
		tag:      applicationName(params["application_name"]),
		settings: sessionSettings(params),
		byOwner:  map[ownerKey]*holding{},
		ids:      map[int64]idUse{},
		perms:    map[string]permitUse{},
		grace:    stmtGrace,
		rescan:   [2]time.Duration{permitRescan, permitRescanListening},
		fenceSem: make(chan struct{}, 1),
		aux:      newAuxConns(),
	}
	prefix := o.prefix
	d.calls.RunAfterClose = true // Close cuts every socket: a call then ends at once
	d.lockID = func(key string) int64 { return LockID(prefix, key) }
	d.permitID = func(key string, i int) int64 { return PermitID(prefix, key, i) }
	d.closing, d.stop = context.WithCancel(context.Background())
	d.sockets.init()
	return d, nil
}

// applicationName returns a tag unique to one Driver, after the application name
// the connection string gives, if any (PostgreSQL keeps 63 bytes of it).
func applicationName(base string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("pgadvisory: crypto/rand failed: " + err.Error())
	}
	tag := "distlock-" + hex.EncodeToString(b[:])
	if base == "" {
		return tag
	}
	const maxBase = 63 - len("distlock-000000000000") - len(" ()")
	for len(base) > maxBase {
		base = base[:len(base)-1]
		for len(base) > 0 && base[len(base)-1]&0xc0 == 0x80 { // keep whole UTF-8 sequences
			base = base[:len(base)-1]
		}
	}
	return base + " (" + tag + ")"
}

// sessionSettings are the settings of every lock session (see Connections in the
// package documentation). Timeouts that would end a wait or an idle holding
// session are always off; keepalive settings apply unless the connection
// string sets them.
func sessionSettings(userSet map[string]string) [2][]string {
	var names, vals []string
	set := func(name, val string, always bool) {
		if _, ok := userSet[name]; ok && !always {
			return
		}
		names = append(names, name)
		vals = append(vals, val)
	}
	for _, t := range []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout", "idle_session_timeout"} {
		set(t, "0", true)
	}
	set("tcp_keepalives_idle", "10", false)
	set("tcp_keepalives_interval", "5", false)
	set("tcp_keepalives_count", "3", false)
	set("tcp_user_timeout", "30000", false)
	set("client_connection_check_interval", "5000", false)
	return [2][]string{names, vals}
}

// ApplicationName returns the application_name of the Driver's lock sessions,
// unique to this Driver: an operator (or a test) finds them with
// SELECT pid FROM pg_stat_activity WHERE application_name = '<it>'.
func (d *Driver) ApplicationName() string { return d.tag }

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: d.o.fencing, Notify: true, FIFO: true, Shared: true, WriterPreference: true, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: driver.DefaultMaxTTL}
}

// pooled records that c's statements ran on another server session (with pid,
// or 0 if unknown) and returns the error that says so. A lock taken on such a
// connection may be stranded on a session the driver no longer reaches, so
// the Driver takes no more.
func (d *Driver) pooled(c *lockConn, pid int32) error {
	err := fmt.Errorf("%w (backend pid %d at setup, then another)", ErrTransactionPooler, c.pid)
	if pid != 0 {
		err = fmt.Errorf("%w (backend pid %d at setup, then %d)", ErrTransactionPooler, c.pid, pid)
	}
	d.mu.Lock()
	if d.pooler == nil {
		d.pooler = err
	}
	d.mu.Unlock()
	return err
}

// heldBy reports the grant of req.Owner if it already holds req.Key.
func (d *Driver) heldBy(req *driver.Request) (driver.Grant, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.Grant{}, false, driver.ErrClosed
	}
	if d.pooler != nil {
		return driver.Grant{}, false, d.pooler
	}
	if h := d.byOwner[ownerKey{req.Key, req.Owner}]; h != nil && !h.gone {
		return driver.Grant{Token: h.token, Start: h.start}, true, nil
	}
	if req.Permits >= 2 || len(d.perms) > 0 {
		return driver.Grant{}, false, d.shapeMismatchLocked(req)
	}
	return driver.Grant{}, false, nil
}

// conflicts reports whether a request for id in the given mode cannot be
// granted in this process because another owner here holds id.
func (d *Driver) conflicts(id int64, shared bool) bool {
	u := d.ids[id]
	return u.n > 0 && (!shared || u.exclusive > 0)
}

// register records a lock just taken on c; c.mu is held, so c's bookkeeping
// matches the session before anyone else sends a statement on it. After Close it
// returns driver.ErrClosed: Close is about to close c, which drops the lock.
// With a claim, shared by the attempts of one permit request, it records only
// the first grant and returns errClaimed for any other, which its caller
// gives back.
func (d *Driver) register(c *lockConn, req *driver.Request, id int64, token uint64, start time.Time, claim *atomic.Bool) (driver.Grant, error) {
	if !d.o.fencing {
		token = 0
	}
	h := &holding{k: ownerKey{req.Key, req.Owner}, id: id, shared: req.Shared, permits: req.Permits, c: c, token: token, start: start, lost: req.Lost}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.Grant{}, errClosed
	}
	if c.dead.Load() {
		return driver.Grant{}, errSessionLost(errors.New("connection given up as the lock was taken"))
	}
	if claim != nil && !claim.CompareAndSwap(false, true) {
		// A permit request waiting on one slot and trying another at once:
		// the first grant registered is the request's, the other is given
		// back by the caller.
		return driver.Grant{}, errClaimed
	}
	c.locks[id] = h
	d.byOwner[h.k] = h
	u := d.ids[id]
	u.n++
	if !h.shared {
		u.exclusive++
	}
	d.ids[id] = u
	d.bookPermitLocked(h, 1)
	return driver.Grant{Token: token, Start: start}, nil
}

// forgetLocked drops h from the bookkeeping; d.mu is held. Forgetting h twice
// is harmless.
func (d *Driver) forgetLocked(h *holding) {
	if d.byOwner[h.k] == h {
		delete(d.byOwner, h.k)
	}
	d.unbookLocked(h)
}

// unbookLocked drops h from its connection's locks and from the ids held, but
// not from byOwner; d.mu is held. A lock is counted in ids exactly while it is
// in its connection's locks.
func (d *Driver) unbookLocked(h *holding) {
	if h.c.locks[h.id] != h {
		return // already dropped, or its connection given up
	}
	delete(h.c.locks, h.id)
	d.bookPermitLocked(h, -1)
	u := d.ids[h.id]
	u.n--
	if !h.shared {
		u.exclusive--
	}
	if u.n <= 0 {
		delete(d.ids, h.id)
	} else {
		d.ids[h.id] = u
	}
}

// broadcastLocked wakes everyone waiting for a usable connection; d.mu is held.
// The channels are made only when someone waits, so the common case costs
// nothing.
func (d *Driver) broadcastLocked() {
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
}

// changedLocked returns the channel broadcastLocked closes; d.mu is held.
func (d *Driver) changedLocked() <-chan struct{} {
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	return d.changed
}

// Close ends every lock session: the server releases the locks still held, as
// it would for a process that ended, and each is reported lost. Waiting Acquire
// calls return driver.ErrClosed; their waits are cancelled on the server first,
// so they leave its lock queue at once. Close does not wait for a server that
// does not answer: after at most closeBudget it closes every socket the driver
// opened. A pool given to New is not closed. Later calls return
// driver.ErrClosed; closing twice returns nil.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.calls.Close()
	d.stop()
	if d.sweeper != nil {
		d.sweeper.Stop()
		d.sweeper = nil
	}
	conns := d.conns
	d.conns = nil
	var lost []driver.LossReporter
	for _, h := range d.byOwner {
		if h.lost != nil {
			lost = append(lost, h.lost)
		}
		h.c.locks = nil
	}
	d.byOwner = map[ownerKey]*holding{}
	d.ids = map[int64]idUse{}
	d.perms = map[string]permitUse{}
	d.broadcastLocked()
	watch := d.watch.Load()
	d.mu.Unlock()

	// A wait is cancelled on the server, so that it leaves the lock queue now:
	// a session whose socket is only closed stays queued until the server
	// next checks on its client, and may be granted the lock meanwhile.
	var aborts sync.WaitGroup
	for _, c := range conns {
		c.dead.Store(true)
		if a := c.abort.Load(); a != nil {
			aborts.Add(1)
			go func() {
				defer aborts.Done()
				a.abort()
			}()
		}
	}
	aborted := make(chan struct{})
	go func() {
		aborts.Wait()
		close(aborted)
	}()
	// Any other statement in flight is cut: its session ends anyway.
	for _, c := range conns {
		if c.mu.TryLock() {
			c.closeConn()
			c.mu.Unlock()
		} else if c.abort.Load() == nil {
			_ = c.net.SetDeadline(time.Unix(1, 0))
		}
	}
	t := time.NewTimer(closeBudget)
	select {
	case <-aborted:
	case <-t.C:
		// The server does not answer the cancels: stop waiting for it.
		d.sockets.closeAll()
	}
	t.Stop()
	for _, c := range conns {
		c.mu.Lock() // a waiter lets go once its wait has returned
		c.closeConn()
		c.mu.Unlock()
	}
	// Sockets still open belong to pgx's clean-up of failed connections
	// (their cancel requests), which a silent server would keep for seconds.
	d.sockets.closeAll()
	<-aborted
	// pgx's clean-up ends at once now that its sockets are closed; wait for
	// it, within a bound, so that no goroutine of the driver's outlives Close.
	cleanup, cancel := context.WithTimeout(context.Background(), cleanupBudget)
	for _, c := range conns {
		select {
		case <-c.cleaned:
		case <-cleanup.Done():
		}
	}
	cancel()
	// Work whose callers stopped waiting (see handoff.go) ends at once now
	// that every socket is closed.
	d.calls.Wait()
	d.closeAux()
	if watch != nil {
		watch.close()
	}
	cause := fmt.Errorf("%w: the driver was closed, which ended its sessions", driver.ErrNotHeld)
	for _, f := range lost {
		f.Lost(cause)
	}
	return nil
}
