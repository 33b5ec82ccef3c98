// Package zkdriver is the distlock driver for Apache ZooKeeper 3.6 or later,
// on github.com/go-zookeeper/zk.
//
//	import _ "github.com/distlock/lock/zkdriver"
//
//	locker, err := lock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/myapp")
//
// A Driver has one ZooKeeper session, and every lock of the Locker over it lives
// in that session: a lock is an ephemeral node, which the server deletes when
// the session ends (closed, or expired because the client was not heard from for
// the session timeout). Goroutines of one process share the session, and each
// Acquire has a node of its own, so they exclude each other as separate
// processes do.
//
// # URL format
//
//	zk://zk1:2181                              one server
//	zk://zk1:2181,zk2:2181,zk3:2181            an ensemble
//	zk://zk1,zk2,zk3                           port 2181 (give ports on all hosts or none)
//	zk://zk1:2181/services/billing             under a chroot, as in the Java connect string
//	zk://locker:secret@zk1:2181/app            digest authentication and ACLs
//	zk://zk1:2181?session_timeout=30s&connect_timeout=5s&prefix=jobs&ttl=1m
//	zk://zk1:2181?exclusive=write               exclusive locks as Curator's write lock
//
// session_timeout is the session timeout the driver asks for (default 10s, the
// time a crashed holder blocks others); the server bounds it to its
// minSessionTimeout and maxSessionTimeout (2 and 20 ticks, 4s and 40s, by
// default), and the driver uses what the server granted. connect_timeout
// bounds how long Open waits for the first session (default 10s). The portable
// ttl, auto_refresh and prefix are described in package lock; any other
// parameter is an error that lists these. exclusive is mutex (the default:
// exclusive requests queue as Curator's InterProcessMutex) or write (as the
// write lock of its InterProcessReadWriteLock; WithWriteLockNodes for New):
// see "Read-write locks and semaphores".
//
// With a user and password the session authenticates with ZooKeeper's digest
// scheme, and every node the driver makes gets the ACL zk.DigestACL(zk.PermAll,
// user, password): only sessions with the same credentials can lock the same
// keys or delete a holder's node. The password never appears in errors or in
// String. Without credentials the nodes are open to all
// (zk.WorldACL(zk.PermAll)). Digest credentials cross the network in the
// clear, and go-zookeeper speaks no TLS: use a trusted network.
//
// ZooKeeper takes any digest password (a wrong one is just another identity)
// and refuses it only where a node's ACL is checked. So Open checks access: it
// makes the chroot and prefix nodes where missing and then, in one request that
// writes nothing, that the session may create a node with the driver's ACL
// under the prefix and read it. A wrong password, or none where the nodes
// need one, fails Open at once with an error that matches zk.ErrNoAuth, says
// "may not lock" and names the user, never the password. It checks the prefix
// node only: a key node made by someone else with an ACL of its own still
// refuses the lock on that key at Acquire (zk.ErrNoAuth, permanent).
//
// A program that already has a *zk.Conn passes it to New instead, with the
// prefix, chroot and ACL as options.
//
// # Layout
//
//	<chroot>/<prefix>/<key>/_c_<uuid>-lock-<sequence>       exclusive
//	<chroot>/<prefix>/<key>/_c_<uuid>-__WRIT__<sequence>    exclusive, with exclusive=write
//	<chroot>/<prefix>/<key>/_c_<uuid>-__READ__<sequence>    shared
//	<chroot>/<prefix>/<key>/locks/_c_<uuid>-lock-<sequence> semaphore: its acquirers' mutex
//	<chroot>/<prefix>/<key>/leases/_c_<uuid>-lease-<sequence> semaphore: a permit
//
// The prefix node ("distlock" unless set) is persistent. Under it each key has a
// key node, named by the key with bytes outside [A-Za-z0-9_:.-] escaped as %XX
// (and a leading '.', and the 'z' of "zookeeper"); a name longer than 200
// bytes is cut to 128 and followed by '~' and the key's SHA-256 in hex, so every
// key has exactly one legal name of at most 200 bytes and distinct keys never
// share one. LockPath returns a key's path. Key nodes are container nodes
// (ZooKeeper 3.6+): the server deletes them once empty, so locking on ever new
// keys leaves nothing behind. The server looks for empty containers every
// znode.container.checkIntervalMs (a Java system property, default one
// minute) and deletes at most znode.container.maxPerMinute (10,000) a minute.
//
// In a key node each Acquire creates an ephemeral sequential node; the lowest
// sequence holds the lock, and each waiter watches only the node right before
// its own (no herd effect: a release wakes one waiter). The node's name carries
// a marker unique to the create ("protected" mode): if the connection drops
// before the reply, the driver finds its node again after reconnecting and uses
// or deletes it, instead of leaving an orphan that would block every later
// waiter until the session ended.
//
// # Curator and zk.Lock
//
// The layout is that of Apache Curator's InterProcessMutex with protection
// (withProtection, which InterProcessMutex uses) and of go-zookeeper's zk.Lock:
// "_c_" + a marker + "-lock-" + the sequence, ordered by the sequence after the
// last "lock-". An InterProcessMutex or a zk.Lock on LockPath(key) (on a client
// with the same chroot, or with the chroot prepended) therefore takes the same
// lock as the driver: Java services and Go services exclude each other. Curator
// makes missing key nodes as containers too; zk.Lock makes them persistent, and
// those stay. Curator's revocation (writing to a holder's node) is ignored.
// Tokens are the driver's own; Curator and zk.Lock have none. Shared locks
// and semaphores are Curator's InterProcessReadWriteLock and
// InterProcessSemaphoreV2: see the next section, which says which mixes of
// Curator's recipes and the driver's shapes exclude each other.
//
// # Read-write locks and semaphores
//
// A shared request (lock.WithShared) queues a "__READ__" node in the key's
// one queue, beside the exclusive requests' "lock-" (or "__WRIT__") nodes, all
// ordered by the sequence after their name, as Curator's read-write lock
// orders its two names. The queueing rule, over that order:
//
//   - an exclusive request holds when no node of any kind is before its own,
//     and watches the node right before it;
//   - a shared request holds when no exclusive node (held or waiting) is
//     before its own, and watches the nearest exclusive node before it;
//     shared nodes before it do not hold it back;
//   - TryAcquire queues a node like Acquire, checks the rule once and deletes
//     the node if it does not hold.
//
// So once an exclusive request waits, shared requests that arrive after it
// wait behind it, and readers that arrived before it keep their turn: a
// stream of overlapping readers delays a writer by the readers ahead of it
// only (WriterIsNotStarvedByAStreamOfReaders, 30 runs under -race on a
// shared 2-core machine at load 4 to 9: the writer's longest wait 40ms to
// 0.73s, mostly 0.05s to 0.25s, on 1s and 3s streams alike; the tail follows
// the machine's load, not the stream). Each waiter
// watches the one node whose deletion can let it in: a release wakes the next
// writer, or the readers behind the released writer, never the whole queue.
//
// A permit of a semaphore of n (lock.WithPermits(n), n >= 2) follows Curator's
// InterProcessSemaphoreV2: an Acquire takes the key's "locks" mutex (the
// exclusive rule above, on <key>/locks), creates its lease under
// <key>/leases, and lists the leases, watching them, until there are at most n,
// its own among them (Curator counts the children: at most maxLeases); then it
// holds with its lease and deletes its mutex node. Only the acquirer holding
// the mutex waits, so freed permits go to acquirers in the mutex's order.
// TryAcquire creates its lease without the mutex and keeps it only if at most
// n leases exist: the count alone keeps the holders to n (of n+1 holders, the
// one whose listing came last would have seen all n+1), the mutex only orders
// the waiters. Refresh, Release, Lost and Close treat a lease as a lock node.
//
// Fencing tokens of shared and permit grants cannot be the listing's pzxid
// (two readers may see the same one): once its node holds, such a grant
// writes the key node (setData, one more round trip) and takes the zxid of
// that write, larger than every zxid before it, so larger than every token
// granted earlier on the key, of any shape, and a writer's pzxid after the
// readers' deletions exceeds all their tokens. The exclusive grant is
// unchanged (its pzxid). A permit's write stores the semaphore's n in the key
// node ("distlock permits=N"); a permit request whose n differs from the one
// stored while another lease exists is driver.ErrInvalidArgument (its lease is
// deleted); with no other lease, it stores its own n.
//
// Interplay with Curator on LockPath(key), both ways:
//
//   - InterProcessReadWriteLock's write lock and the driver's shared locks
//     exclude each other, and its read lock shares with them; a Curator
//     writer waiting behind the driver's readers holds back the driver's
//     later readers, and the other way round.
//   - The driver's exclusive locks take part only with exclusive=write: in
//     the default layout Curator's readers wait for "__WRIT__" nodes alone,
//     and its writers sort "lock-" nodes after their own, so neither would
//     wait for the driver's exclusive holder. So where Java services use
//     InterProcessReadWriteLock on the same keys, open the driver with
//     exclusive=write; its exclusive locks then no longer exclude an
//     InterProcessMutex or a zk.Lock (zk.Lock also fails on a key holding
//     "__READ__" nodes, whose sequence it cannot parse).
//   - InterProcessSemaphoreV2 on the same path with the same maxLeases shares
//     the permits with the driver's. Curator keeps no n of its own beside the
//     leases (a SharedCount, if used, lives elsewhere), so a Curator client's
//     n is not checked; Curator leaves the key node's data alone.
//
// Not detected: a key used both as a lock and as a semaphore (the lock's
// nodes and the semaphore's "locks" and "leases" nodes live side by side in
// the key node and ignore each other), and permits of another n when no
// other lease is held at that moment.
//
// # Capabilities
//
//   - Fencing: yes; the token is the key node's pzxid as seen by the listing
//     that made the lock ours: the zxid of the last change to the queue before
//     we held it, at least our node's creation zxid, and greater than the
//     previous holder's token, since that holder's node was deleted before. A
//     zxid grows across the ensemble and its restarts, and across a key node
//     that was removed and made again (where sequence numbers restart).
//   - Expiring: no; a lock lives as long as its session. The TTL bounds how long
//     a lock is trusted without a confirmed refresh, which reads the node, or
//     (for a node with a watch) any path: see below.
//   - Notify: yes; a waiter is woken by a watch on the node before its own.
//   - FIFO: yes; the sequence numbers are the order of arrival (for permits,
//     the order of the semaphore's locks mutex).
//   - Shared: yes, with WriterPreference (the rule above).
//   - Permits: yes; another n is ErrInvalidArgument where it can be seen (see
//     Read-write locks and semaphores).
//   - MinTTL and MaxTTL: 10ms and 366 days (driver.FloorTTL and
//     driver.DefaultMaxTTL), package lock's range: the TTL bounds how long a lock is trusted without a confirmed refresh.
//
// # Inspection, eviction and leader election
//
// The Driver implements driver.Inspector, Lister, Evictor, Labeler and
// Watcher on the nodes above, with no node of its own beside a hold:
//
//	<root>/<key>/_c_<uuid>-lock-<seq>      data: the holder's label (JSON)
//	<root>/.forced/<escaped path of a node> a tombstone left by ForceRelease
//
// A hold's label (package lock's JSON: owner name, time, a leader's value)
// is its node's data, written by the create itself: the mutex's round trips
// are unchanged, and the node carries some 50 bytes more. Curator's
// InterProcessMutex writes its client's IP address there and zk.Lock
// nothing; Inspect reports such data as the label, which package lock
// reads as the owner name ("10.0.0.7", or ""), and Curator and zk.Lock
// never read a lock node's data, so interop is as before. Relabel (Campaign,
// Proclaim) rewrites the holder's own node with one setData (ErrNotHeld when
// the node is gone), adding the field "token" to the JSON with the
// holder's token.
//
// Inspect lists the key node and reads the holders' nodes (two round trips;
// a semaphore's key node, leases and locks are read together, so three).
// The holders are those the queueing rule lets in: the readers before the
// first exclusive node, or that node when first; a semaphore's first n
// leases by sequence. Waiters is exact for locks: every other queued node
// (a waiter's node is in the queue from its first round trip). For a
// semaphore it counts the acquirers queued on its locks mutex, and a lease
// beyond n, which is about to hold or to go, is neither holder nor waiter.
// Holder.Owner is the node's name (unique to one create). Since is the
// node's creation time by the server's clock: the grant of an uncontended
// holder, and for one that waited the start of its wait (ZooKeeper records
// no grant). It is not the label's time, which Campaign rewrites once it has
// won, so a leader's Since does not change under Observe. Expires is zero
// (session-bound). Holder.Token is exact where Relabel recorded it (every
// leader, once Campaign has returned); otherwise an exclusive holder's is
// its node's creation zxid, the token of an uncontended grant and a lower
// bound of a grant after a wait (a pzxid after the predecessor's deletion,
// which the tree does not keep), and a reader's or a permit's is zero (its
// token is a write to the key node that no node records). So in the one
// round trip between a contended campaigner's win and Campaign's Relabel,
// Leader reports the lower bound as its term, and an Observe that looks
// then reports that leader again once the term is recorded. Info.Token is the
// key node's latest change (the larger of its pzxid and mzxid): at least
// every token granted on the key and less than every later one; it equals
// the latest grant's token unless the queue changed since (a waiter came,
// a TryAcquire came and went).
//
// List lists the root's children, keeps the key nodes of keys under the
// prefix (the node name decodes back to the key) and lists each of them,
// batchParallel at a time: one round trip plus about one per 16 matching
// keys, each listing the size of its queue. A key is listed when its queue
// (or its semaphore's leases) has a node: the first node always holds. A
// key longer than about 200 escaped bytes has a cut and hashed node name
// (see Layout), which cannot be decoded: such keys are not listed.
//
// ForceRelease deletes the holders' nodes (any session may delete another's
// ephemeral node, ACLs allowing) and, in the same transaction, creates a
// persistent tombstone for each under <root>/.forced. The evicted holder's
// driver, once it finds its node deleted (at once through the watch it sets
// on a node held for 200ms, on a Driver from Open; else at its next
// refresh, or its Release or Relabel), deletes its tombstone, one round
// trip, and if it was there reports the loss as driver.ErrForceReleased;
// without one it is an ordinary deletion. A tombstone whose holder never
// reads it (its driver closed, its session ended, or a Curator or zk.Lock
// holder) is deleted by a later ForceRelease, of any key, once it is ten
// minutes old by the server's clock. The deletions are changes of the key
// node's children with later zxids than every evicted grant, so the next
// grant's token, of any shape, is larger; the evicted holder's Release
// deletes only its own node, which is gone. An operator's eviction is not
// told to the holder before the next holder is granted: it learns within a
// round trip of the watch event, or at its next refresh.
//
// Watch sets ZooKeeper watches: on the key node's children (or, while it
// is missing, its creation), a semaphore's leases, and the data of an
// exclusive holder's node (a Relabel); after each event one goroutine per
// Watch sets them again and then signals, so a look after the signal sees
// every change. A leader's Observe is woken by these, not polled.
//
// Leader election is an exclusive lock (package lock): a campaigner queues
// like any other, each watching its predecessor, so a resignation wakes
// exactly the next campaigner; a leader whose process dies is replaced when
// its session expires.
//
// # Deadlines and Close
//
// Every call ends when its context does. go-zookeeper's own calls take no
// context: the driver hands each to a worker and, when the context ends first,
// returns the context's error and settles the call when go-zookeeper returns
// it (a create that succeeded after all is used or deleted, never orphaned).
// Open honours its context in every step: the lookup of the servers' names
// and the connect handshake of the first session (both done by the driver,
// since go-zookeeper's take no context; go-zookeeper then takes the
// connection over), authentication and the checks of the prefix node. If the
// context ends first, Open returns at once with the context's error, leaving
// no goroutine: it closes its own connection, or, once go-zookeeper runs,
// closes the connection under it as soon as the request to close the session
// is on the wire. Each server gets at most two thirds of the session timeout
// to answer the handshake before the next is tried. connect_timeout bounds the
// wait for the first session even when the context would allow more;
// lock.Open adds its open_timeout to a context without deadline. When every
// server refuses the connection (nothing listens on its port), Open fails at
// once with driver.ErrUnavailable and the last refusal; only a server that
// does not answer is waited for.
//
// Close asks the server to end the session and waits for it at most half a
// second (closeGrace); then it closes the connection itself, which ends
// go-zookeeper's reads and writes at once: on a frozen or unreachable server
// Close returns after about half a second, or a second when go-zookeeper was
// in the middle of a reconnection, two when sixteen requests were waiting for
// that reconnection, not after the session timeout. No goroutine of the
// driver or of go-zookeeper outlives it. A session not closed this way expires
// on the server after its timeout, and its lock nodes go then. A Driver from
// New leaves the program's connection open: it deletes its nodes within the
// same half second, and a request it gave up on (its context ended) runs on in
// a goroutine until go-zookeeper answers it or drops the connection.
//
// # Errors
//
// Each call makes one attempt and reports its outcome; the portable layer
// retries. Against a server that accepts connections and answers nothing
// (frozen, stalled), a TryAcquire whose context has no deadline fails with
// driver.ErrUnavailable (zk.ErrConnectionClosed) once go-zookeeper's read
// times out and drops the connection: after two thirds of the session
// timeout. A failure that a later attempt may not meet is marked
// driver.ErrUnavailable (lock.ErrUnavailable): the connection closed or could
// not be made (zk.ErrConnectionClosed, zk.ErrNoServer), a network error or
// timeout, a session moved to another server (zk.ErrSessionMoved) or expired
// under an Acquire (the next attempt queues in the new session), and the
// server's connection-loss and operation-timeout codes. Every other error is
// permanent and returned as it is, wrapped: zk.ErrNoAuth and zk.ErrAuthFailed
// (credentials), zk.ErrInvalidACL, zk.ErrBadArguments. Refresh and Release
// wait within their context for a disconnected client to reconnect before
// their one request; Acquire waits for the lock, not for the connection.
//
// # Logging
//
// The driver prints nothing. go-zookeeper logs its connection's life (a
// failed connection attempt, a dropped connection, a new session or a
// reconnection, a refused authentication) to the standard logger by default;
// on a connection opened from a URL the driver gives it a logger of its own,
// which drops the lines until a Locker gives the driver one (lock.WithLogger;
// the driver implements driver.LoggerUser) and then passes them there with
// the attribute client=go-zookeeper: a refused authentication at Warn, the
// connection's events at Info (go-zookeeper repeats its attempts while a
// server is away; the Locker warns once that the backend is unreachable), the
// rest at Debug. A connection given to New keeps the logger the program gave
// it.
//
// # Sessions and lost locks
//
// Lost closes for every lock of a session when the session expires or is
// closed, as soon as the client learns it (when it reconnects). A disconnected
// session is suspended, not lost: if the client reconnects within the session
// timeout, the session and its locks survive (a leader election in the
// ensemble, for example). But the ensemble's leader may expire the session
// once the session timeout has passed since it last heard of it, and then let
// another client in; so the driver counts a held lock as lost once the
// negotiated session timeout, less the drift allowance (driver.Drift: 1% and
// 2ms), has passed since the latest moment the leader is known to have heard
// of the session. The server the client talks to is no witness of that: a
// follower cut off from the leader goes on answering reads until it notices,
// syncLimit ticks later, and the leader hears of a session on a follower only
// from the follower's answers to its pings (every tickTime/2), then expires it
// a session timeout after the latest such report, rounded up to the next tick.
// So the driver syncs with the leader every third of the session timeout,
// always while connected (one sync, the rate of the read it used to send while
// holding locks): a sync is answered only after the leader has received every
// ping answer the follower sent before it, and a third of the session timeout
// is longer than tickTime/2, so the previous sync, a third of the timeout
// earlier, has been reported by then, and its send time becomes the moment
// the leader has heard of the session. A session handshake (new, or a
// reconnection, which the leader revalidates itself) counts from its send
// time. If the session comes back after all, the driver deletes the nodes it
// gave up.
//
// So a lock's validity ends at the earlier of two moments: the portable
// layer's deadline (the grant or the last confirmed refresh, plus the TTL,
// less its drift allowance) and that moment plus the negotiated session
// timeout, less the same drift allowance. With any TTL, Lost closes before
// the leader may expire the session and give the lock to another client, as
// long as the clocks run within 1% of each other and the session timeout is
// at least two ticks (ZooKeeper's default minSessionTimeout), so that a third
// of it exceeds the leader's ping interval. A leader that is itself cut off
// from the quorum answers its clients until it notices (syncLimit to
// syncLimit+1 ticks after it last heard from the quorum), while the others may
// elect a new leader, which starts every session's timeout afresh at its
// start, once syncLimit ticks have passed without a word from the old one
// (less the half tick between its pings): the guarantee holds there when the
// counted moment, at least a third of the session timeout before the last
// answer, precedes the new leader's start, which a session timeout of at least
// 4.5 ticks ensures (the test ensemble's 8 does; measured below). A TTL longer
// than the session timeout does not extend a lock; a shorter one gives it up
// sooner when refreshes fail. A Driver from New has this bound only with
// WithSessionTimeout; without it, keep the TTL at most the session timeout.
//
// The price: the moment counted trails the present by one to two thirds of
// the session timeout (one link of the chain, plus round trips), where the
// last answer used to trail it by at most a third. So a holder that loses its
// server, or whose server freezes or is cut off, gives its locks up one to
// two thirds of the session timeout after that, not two to three thirds
// (later, up to the full timeout, when a session handshake was the latest
// news); the session survives such an outage as before, but its locks survive
// for sure only outages shorter than a third of the session timeout. Measured
// with a 4s session timeout, holder cut off from the majority, five runs each
// (the last news was the Open's handshake, just before the partition): on a
// follower, Lost 3.4s to 3.9s after the partition and the majority's grant
// 0.33s to 0.71s later (before the chain: Lost 7.85s after, 3.3s to 3.8s
// after the grant); on the leader, Lost 6.5s to 7.9s after and the grant 1.8s to 3.1s
// later (the cut-off leader answered until it stepped down, 5s to 5.5s after,
// and the new leader counted the session's timeout from its start).
//
// A frozen server (4s session timeout) makes Lost close 1.3s to 2.7s after the
// freeze, depending on where in the sync chain it froze (up to 3.9s, the drift
// allowance before the server could first expire the session, when the
// session's handshake was the latest news). A server restarted without its
// data has
// forgotten the session and its locks and gives them to the next client at
// once, while refusing the holder's reconnection (the holder has seen later
// transactions than the empty server). Once every server it can reach has
// refused it this way, the driver reconnects without that guard (a server
// that still knows the session resumes it, one that does not says it expired),
// hears that the session expired, and closes Lost: measured 0.03s to 1.75s
// after the server answered again (go-zookeeper reconnects once a second),
// where go-zookeeper alone would wait for the session timeout (19s measured
// with a 20s one). Another client may hold the lock in that window, since
// nothing but the server could have told the holder.
//
// A held node deleted by someone else (an operator) also ends the lock: on a
// Driver from Open a watch reports it at once (the watch is set once a lock has
// been held for 200ms, so short critical sections never pay for it), and any
// refresh finds it. Because ZooKeeper delivers a watch event before the answer
// to any later request of the session, the locks of a refresh batch whose
// nodes carry a watch are all confirmed by one read, and the batches that
// overlap share it (the first sends it half a refresh interval later, or
// sooner when its context requires; the validity of each still counts from
// its own start): holding 10,000 locks costs about two reads per refresh
// interval (measured: 2 requests/s, TTL 3s), not one per lock or per batch.
// A Driver from New learns of an expired session by polling its connection
// every 50ms, and of a deleted node at the next refresh; it
// needs WithSessionTimeout to give locks up before a suspended session can
// expire (go-zookeeper does not tell its users the negotiated timeout). It
// does not see go-zookeeper's handshakes either: a reconnection counts from
// the moment its monitor saw the connection down (it looks every 50ms while
// holding locks or disconnected), and one it did not see leaves the count to
// the sync chain.
//
// Refresh and Release wait for a disconnected client to reconnect (within their
// context), then answer for the session they find.
//
// The cause of a loss (lock.Err and Do's context.Cause match it):
//
//   - lock.ErrSessionExpired: ZooKeeper said the session expired or it was
//     closed (also after a server came back without its data), which the
//     client hears only once it reconnects: if the lock's validity ends
//     first (refreshes cannot be confirmed meanwhile), the cause is
//     lock.ErrExpired;
//   - lock.ErrExpired: no contact with the leader was confirmed within the
//     session timeout (the session may have expired), or the held node was
//     deleted by someone else;
//   - lock.ErrForceReleased: ForceRelease deleted the node (its tombstone
//     says so).
//
// # Limits
//
// ZooKeeper 3.6 or later (container nodes). A process paused for longer than
// the session timeout wakes up holding locks the server already gave away;
// Lost closes as soon as it runs, and only fencing tokens protect the resource
// in between. A ZooKeeper that loses its data (restarted empty, or restored
// from an old backup) starts its zxids again, so tokens after the loss can be
// lower than tokens before it: fencing holds only across restarts that keep
// the data, and a holder learns of the loss only when it reconnects (see
// above). A Driver from New learns of such a loss only when the session
// timeout given by WithSessionTimeout, or else the TTL, has passed. Each
// held lock and each waiter costs one node and a watch on the server (a
// held lock's once held for 200ms), and no goroutine in the client. A key node whose
// sequence counter passes 2^31 (two billion locks without ever being empty)
// wraps to negative numbers (ZOOKEEPER-2944); the driver orders across the wrap,
// Curator and zk.Lock do not.
//
// Shapes: a shared grant costs one write more than the mutex's (the token's
// setData); a permit, uncontended, about seven round trips (the locks mutex's
// create, listing and delete, the lease's create and listing, and the n's
// read and write), and permit acquirers wait one at a time behind the locks
// mutex, as Curator's do. A semaphore's waiter whose session expires while it
// waits queues again in the new session. Readers woken by a writer's release
// all list the queue at once (they may all hold).
package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// Driver holds locks in one ZooKeeper session. Use it through lock.New or
// lock.Open; its methods implement driver.Driver, driver.Acquirer and
// driver.BatchRefresher.
type Driver struct {
	conn      *zk.Conn
	ownConn   bool            // made by Open: closed by Close, watched through tapConn and onEvent
	events    <-chan zk.Event // own connection only: closed when go-zookeeper's loop has ended
	root      string          // the node every key's node lives under: chroot + "/" + escaped prefix
	rootPath  []string        // root and its ancestors below "/", to create when missing
	acl       []zk.ACL
	exclusive string        // the kind of an exclusive request's node: lockName, or writeName (WithWriteLockNodes)
	declared  time.Duration // New: the session timeout given by WithSessionTimeout (0: unknown)
	zkLog     *zkLogger     // go-zookeeper's logger on a connection opened from a URL (logging.go)

	epoch     time.Time    // lastTouch counts from here, on the monotonic clock
	lastTouch atomic.Int64 // credit: the leader heard of the session at this time or later (session.go)

	ctx        context.Context // cancelled by Close; bounds background work
	cancel     context.CancelFunc
	done       chan struct{}                 // closed by Close
	wake       chan struct{}                 // nudges the monitor
	state      atomic.Pointer[chan struct{}] // closed (and replaced) at each session event
	wire       wire                          // requests written, as tapConn sees them
	conns      connSet                       // own connection only: the sockets go-zookeeper uses
	handshakes handshakes                    // own connection only: refused ConnectRequests
	wg         sync.WaitGroup
	calls      kit.Calls           // runs go-zookeeper's calls (call.go); closed with the connection
	rounds     kit.Round[struct{}] // the shared read that RefreshBatch calls join (confirm.go)

	mu      sync.Mutex
	closed  bool
	holds   map[holdKey]*holding
	byPath  map[string]*holding // granted locks by node path
	orphans []orphan            // nodes of ours nobody wants, to delete once possible
	parents map[uint64]struct{} // key nodes known to exist, by parentHash
	seed    maphash.Seed        // of parentHash
	beating bool                // a heartbeat is in flight

	// The heartbeat chain (session.go): the send and answer times of its last
	// answered link, not yet credited, and when the next may be sent after a
	// failed one.
	link, linkAnswered time.Time
	beatAfter          time.Time
	sawDown            time.Time // New: when the monitor last saw the connection down (zero: not since the last session)

	armWake    bool          // the monitor will look for watches to set
	cleaning   bool          // orphans are being deleted
	cleanAfter time.Time     // no cleaning before this, after a failed one
	session    sessionInfo   // learnt by tapConn (own connection only)
	pre        *tapConn      // Open's first session, until go-zookeeper dials it
	tombLife   time.Duration // kit.TombstoneLife of an unknown TTL; shorter in tests
	shareWait  time.Duration // maxShareWait; longer in tests
}

// sessionInfo is the session as the last connect handshake told it.
type sessionInfo struct {
	id      int64
	timeout time.Duration // negotiated
	passwd  []byte
}

type holdKey struct{ key, owner string }

type holdState uint8

const (
	stateWaiting   holdState = iota // creating the node, or queued behind others
	stateGranted                    // ours
	stateReleasing                  // Release is deleting the node
	stateReleased                   // Release deleted it
	stateDone                       // lost, or forgotten
)

// holding is one Request's node. A held lock costs one of these, its node's
// path (one string, which the maps, go-zookeeper's watch and parent share)
// and the watch; what only an acquisition needs is in acq, dropped at the
// grant.
type holding struct {
	req    *driver.Request
	parent string // the key's node; once node is known, a prefix of it
	node   string // our node's path, parent + "/" + its name; "" until known
	kind   string // the node's kind: lockName, readName, writeName or leaseName
	acq    *acquiring

	// Set when granted.
	token   uint64
	session int64
	start   int64 // the grant's Start, on the driver's clock (Driver.at)

	verdict *verdict // why the node went, once someone else deleted it (inspect.go)

	state   holdState
	watched bool // a watch on the node reports its deletion (own connection)
	arming  bool // the monitor is setting that watch
}

// acquiring is what a holding needs until it is granted.
type acquiring struct {
	marker    string // of the node being or last created; "" before the first create
	fence     int64  // a zxid of the grant's own, the token instead of the pzxid (0: none)
	createdIn int64  // the live session before its create was sent (0: unknown)
	owner     int64  // the session that owns the node called name, once known
	pzxid     int64  // the key node's pzxid in the listing that made the lock ours (see viewed)
	viewed    bool   // pzxid is set: a listing showed the node
	unsure    bool   // a create with marker may have been applied unseen
	sent      bool   // a create is in flight; createAbandoned settles it if its caller left
}

// a returns h's acquisition state, made anew if it was dropped. d.mu is
// held.
func (h *holding) a() *acquiring {
	if h.acq == nil {
		h.acq = &acquiring{}
	}
	return h.acq
}

// name is our node's name under parent, "" until known.
func (h *holding) name() string {
	if h.node == "" {
		return ""
	}
	return h.node[len(h.parent)+1:]
}

// setName records our node's name under parent ("": none).
func (h *holding) setName(name string) {
	if name == "" {
		h.node = ""
		return
	}
	h.setNode(h.parent + "/" + name)
}

// setNode records our node's path, which is under parent, and makes parent
// share its memory.
func (h *holding) setNode(path string) {
	h.node = path
	h.parent = path[:len(h.parent)]
}

func (h *holding) path() string { return h.node }

// permits is a semaphore's n (leaseName); 0 otherwise.
func (h *holding) permits() int {
	if h.kind == leaseName {
		return h.req.Permits
	}
	return 0
}

// ownerOrCreator is the session h's node belongs to, as far as known: its
// owner once read, else the session before its create (0: unknown).
func (h *holding) ownerOrCreator() int64 {
	if h.session != 0 {
		return h.session // granted
	}
	if h.a().owner != 0 {
		return h.a().owner
	}
	return h.a().createdIn
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
)

// New returns a Driver that locks through conn, a connection the program
// already has. The session of conn holds the locks, so each process (or each
// independent part of one) should have its own. Close leaves conn open and
// deletes the nodes the driver made.
//
// go-zookeeper does not tell its users the session timeout it negotiated, nor
// hand them its events once connected: give the timeout with WithSessionTimeout
// so that a disconnected session counts as lost in time. The driver notices an
// expired session by polling conn's state and a deleted lock node at the next
// refresh; a Driver from Open learns both at once.
func New(conn *zk.Conn, opts ...Option) (*Driver, error) {
	if conn == nil {
		return nil, errors.New("zkdriver: nil *zk.Conn")
	}
	o := options{prefix: DefaultPrefix, acl: zk.WorldACL(zk.PermAll)}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.err != nil {
		return nil, o.err
	}
	d := newDriver(o.chroot, o.prefix, o.acl)
	if o.writeNodes {
		d.exclusive = writeName
	}
	d.conn = conn
	d.declared = o.sessionTimeout
	d.start()
	return d, nil
}

func newDriver(chroot, prefix string, acl []zk.ACL) *Driver {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	d := &Driver{
		root:      chroot + "/" + escapeName(prefix),
		exclusive: lockName,
		acl:       acl,
		epoch:     time.Now(),
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		zkLog:     newZKLogger(),
		holds:     map[holdKey]*holding{},
		byPath:    map[string]*holding{},
		parents:   map[uint64]struct{}{},
		seed:      maphash.MakeSeed(),
		tombLife:  kit.TombstoneLife(0),
		shareWait: maxShareWait,
	}
	for i := 1; i < len(d.root); i++ {
		if d.root[i] == '/' {
			d.rootPath = append(d.rootPath, d.root[:i])
		}
	}
	d.rootPath = append(d.rootPath, d.root)
	d.calls.Workers = maxWorkers
	d.ctx, d.cancel = context.WithCancel(context.Background())
	ch := make(chan struct{})
	d.state.Store(&ch)
	return d
}

func (d *Driver) start() {
	d.wg.Add(1)
	go d.monitor()
}

// dial opens a session for a zk:// URL, makes the driver's root and checks
// that the session may lock under it. Every step ends with ctx: go-zookeeper's
// own waits (a name lookup, the connect handshake) take no context, so the
// driver resolves the names itself and, if ctx ends first, closes the
// connection under go-zookeeper.
func dial(ctx context.Context, c urlConfig, prefix string) (*Driver, error) {
	servers, err := resolve(ctx, c.servers)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	if c.user != "" {
		acl = zk.DigestACL(zk.PermAll, c.user, c.password)
	}
	d := newDriver(c.chroot, prefix, acl)
	if c.writeNodes {
		d.exclusive = writeName
	}
	d.ownConn = true
	distinct := map[string]struct{}{}
	for _, s := range servers {
		distinct[s] = struct{}{}
	}
	d.handshakes.servers = len(distinct)
	first, err := d.firstSession(ctx, servers, c.sessionTimeout, c.connectTimeout)
	if err != nil {
		d.cancel()
		return nil, fmt.Errorf("zkdriver: %s: %w", strings.Join(c.servers, ","), err)
	}
	d.pre = first
	conn, events, err := zk.Connect(servers, c.sessionTimeout,
		zk.WithLogger(d.zkLog), zk.WithLogInfo(true), zk.WithHostProvider(&hostList{first: first.addr}),
		zk.WithDialer(d.dialTap), zk.WithEventCallback(d.onEvent))
	if err != nil {
		d.cancel()
		first.Conn.Close()
		return nil, fmt.Errorf("zkdriver: %w", err)
	}
	d.conn, d.events = conn, events
	fail := func(err error) (*Driver, error) {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		close(d.done)
		d.cancel()
		// A session that answered is closed properly; after ctx ended, the
		// server is not waited for.
		d.endConn(ctx.Err() == nil)
		d.endCalls()
		return nil, err
	}
	if err := waitSession(ctx, conn, events, c.connectTimeout); err != nil {
		return fail(fmt.Errorf("zkdriver: %s: %w", strings.Join(c.servers, ","), err))
	}
	if c.user != "" {
		// Digest authentication never fails here: the server takes any
		// password as another identity, which shows only when a node's ACL is
		// checked (checkAccess). go-zookeeper sends it again after every
		// reconnection.
		_, err := call(d, ctx, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(c.user+":"+c.password))
		}, nil)
		if err != nil {
			return fail(fmt.Errorf("zkdriver: digest authentication: %w", unavailable(err)))
		}
	}
	if err := d.ensureRoot(ctx); err != nil {
		return fail(d.accessError(unavailable(err), c.user))
	}
	if err := d.checkAccess(ctx); err != nil {
		return fail(d.accessError(unavailable(err), c.user))
	}
	d.start()
	return d, nil
}

// resolve looks the servers' host names up within ctx, so that go-zookeeper,
// which would look them up itself with a timeout of its own, gets addresses.
func resolve(ctx context.Context, servers []string) ([]string, error) {
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("%w: zkdriver: server %q is not host:port", driver.ErrInvalidURL, s)
		}
		if net.ParseIP(host) != nil {
			out = append(out, s)
			continue
		}
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				return nil, fmt.Errorf("zkdriver: server %q: %w", s, err)
			}
			return nil, fmt.Errorf("zkdriver: server %q: %w", s, unavailable(err))
		}
		for _, a := range addrs {
			out = append(out, net.JoinHostPort(a, port))
		}
	}
	return out, nil
}

// waitSession waits until conn has a session.
func waitSession(ctx context.Context, conn *zk.Conn, events <-chan zk.Event, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for conn.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("%w: no ZooKeeper session within %v (connect_timeout)", driver.ErrUnavailable, timeout)
		}
	}
	return nil
}

// LockPath returns the path of key's lock node, the parent of the lock
// queue's nodes. A go-zookeeper zk.Lock or a Curator InterProcessMutex made on
// this path (on a client without chroot) takes the same lock.
func (d *Driver) LockPath(key string) string { return d.root + "/" + escapeName(key) }

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fencing: true, Expiring: false, Notify: true, FIFO: true,
		Shared: true, WriterPreference: true, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: driver.DefaultMaxTTL}
}

// closeGrace is how long Close waits for the server to confirm the end of the
// session before it closes the connection without that: a server that answers
// does so within milliseconds, and one that does not (frozen, partitioned, or
// gone) must not hold Close up. The server then expires the session after its
// timeout, and deletes its nodes then. For a Driver from New it bounds the
// deletion of the nodes the driver made.
const closeGrace = 500 * time.Millisecond

// Close ends the driver. A Driver from Open closes its session, which makes the
// server delete every lock node of it at once; a Driver from New deletes its
// nodes and leaves the connection open. Locks still held are reported lost.
// Waiting Acquire calls return driver.ErrClosed, and so does every later call;
// closing twice returns nil.
//
// Close waits for the server for at most about half a second: on a server that
// does not answer, a Driver from Open closes its connection without the
// server's word, and the session and its nodes then last until the server
// expires it; a Driver from New leaves what it could not delete to the end of
// its session. Close returns within about a second in every case (go-zookeeper
// gives up its close request after a second when a reconnection is under way,
// two when sixteen requests already wait for a reconnection), and no goroutine
// of the driver or of go-zookeeper outlives it.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.cancel()
	var lost []*driver.Request
	var nodes []orphan
	for _, h := range d.holds {
		if h.state == stateGranted || h.state == stateReleasing {
			lost = append(lost, h.req)
		}
		switch {
		case h.name() != "":
			nodes = append(nodes, orphan{path: h.path(), session: h.ownerOrCreator()})
		case h.a().unsure:
			nodes = append(nodes, orphan{parent: h.parent, marker: h.a().marker, session: h.a().createdIn})
		}
		h.state = stateDone
	}
	nodes = append(nodes, d.orphans...)
	d.holds, d.byPath, d.orphans = map[holdKey]*holding{}, map[string]*holding{}, nil
	d.mu.Unlock()

	// Before the nodes go, so that Lost closes before anyone else can hold.
	for _, r := range lost {
		r.Lost.Lost(errClosed)
	}
	if d.ownConn {
		d.endConn(true)
		d.wg.Wait()
		d.endCalls()
		return nil
	}
	err := d.removeOnClose(nodes)
	// The program's connection stays open: calls still under way end when
	// it answers, and the idle workers now.
	d.calls.Close()
	d.wg.Wait()
	return err
}

// endConn ends the connection the driver made, and every goroutine of
// go-zookeeper's. It asks the server to close the session (go-zookeeper's
// Close) and, with waitAnswer, waits up to closeGrace for the answer; without,
// only until the request is on the wire. Then it closes the sockets under
// go-zookeeper, which ends its reads and writes at once, and fails a close
// request already sent, so that go-zookeeper's Close returns too.
func (d *Driver) endConn(waitAnswer bool) {
	sent := d.wire.expect(opCloseSession, "")
	defer d.wire.forget(opCloseSession, "", sent)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		d.conn.Close()
	}()
	var until <-chan struct{} // nil: wait for the answer
	switch {
	case !waitAnswer && d.conn.State() != zk.StateHasSession:
		until = alreadyClosed // no session to close: at once
	case !waitAnswer:
		until = sent
	}
	t := time.NewTimer(closeGrace)
	select {
	case <-closed:
	case <-until:
	case <-t.C:
	}
	t.Stop()
	d.conns.abort()
	d.mu.Lock()
	pre := d.pre
	d.pre = nil
	d.mu.Unlock()
	if pre != nil { // go-zookeeper never took it
		_ = pre.Conn.Close()
	}
	<-closed
	for range d.events { // closed when go-zookeeper's main loop has ended
	}
	d.conns.wait(closeGrace)
}

// alreadyClosed is a closed channel.
var alreadyClosed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// endCalls refuses further calls and waits for those under way, and for the
// goroutines that ran them: on a closed connection they all end at once.
func (d *Driver) endCalls() {
	d.calls.Close()
	d.calls.Wait()
}

// removeOnClose deletes the nodes of a Driver from New from the connection,
// which stays open, pipelined, within closeGrace. A node of a session that
// ended went with it; one that cannot be deleted now (disconnected, or no
// answer in time) stays until the session ends.
func (d *Driver) removeOnClose(nodes []orphan) error {
	if len(nodes) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	if d.conn.State() != zk.StateHasSession {
		// No events come from a connection of the program's own: look.
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for d.conn.State() != zk.StateHasSession {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("zkdriver: deleting lock nodes on close (they stay until the session ends): %w: not connected", driver.ErrUnavailable)
			}
		}
	}
	live := d.conn.SessionID()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, batchParallel)
	)
	for _, o := range nodes {
		if o.session != 0 && o.session != live {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.removeOrphan(ctx, o); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("zkdriver: deleting lock nodes on close (they stay until the session ends): %w", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// Errors the driver reports for a lock that is gone.
var (
	errSessionEnded = fmt.Errorf("%w: %w: the ZooKeeper session ended (expired or closed), and its lock nodes with it", driver.ErrNotHeld, driver.ErrSessionExpired)
	errSuspended    = fmt.Errorf("%w: %w: no contact with ZooKeeper for the session timeout: the session may have expired", driver.ErrNotHeld, driver.ErrExpired)
	errNodeDeleted  = fmt.Errorf("%w: %w: the lock node was deleted", driver.ErrNotHeld, driver.ErrExpired)
	errClosed       = fmt.Errorf("%w: the ZooKeeper driver was closed (%w)", driver.ErrNotHeld, driver.ErrClosed)
)

// at is t on the driver's clock: the time since its epoch, by the monotonic
// clock where t carries it (time.Now's do).
func (d *Driver) at(t time.Time) int64 { return int64(t.Sub(d.epoch)) }

// timeAt is the time of an instant on the driver's clock.
func (d *Driver) timeAt(i int64) time.Time { return d.epoch.Add(time.Duration(i)) }
