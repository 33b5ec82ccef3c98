package pgadvisory

import (
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
)

// The SQL the driver runs on its dedicated lock connections. $1 is always the lock
// id (bigint) and $2 the backend pid the connection had when it was set up.
//
// Statements that draw a fencing token take the sequence's OID as $3: a
// sequence dropped and re-created under a running driver (its values restarting
// at 1) is then an error, not a silent step back.
//
// Their results are single values: a bigint or integer token, a boolean, or
// NULL.
//
// Every statement that takes or gives up a lock first compares pg_backend_pid()
// with $2, inside the same statement: behind a transaction-pooling proxy two
// statements of one client connection may run on different server sessions, and
// a lock taken on the wrong one would be stranded there. A NULL result means
// "wrong session, nothing done".
//
// Taking a lock and drawing its fencing token is one statement, so one round
// trip: CASE evaluates its branches in order and calls nextval only once the lock
// is ours. nextval does not use a transaction id per call: PostgreSQL logs a
// sequence 32 values ahead and assigns an xid only when it writes that log
// record, so the driver burns one xid per 32 locks, and the token survives a
// crash because that xid's commit waits for the WAL flush (the setup statement
// turns synchronous_commit back on for lock sessions where it was off).
const (
	// tryLockSQL returns NULL (wrong session), 0 (held elsewhere) or the token.
	tryLockSQL = `SELECT CASE WHEN pg_backend_pid() <> $2 THEN NULL WHEN pg_try_advisory_lock($1) THEN {token} ELSE 0 END`
	// trySetSQL tries every id of the bigint[] $1 (one key each of a set),
	// gives back the ones it took unless it took them all, and returns NULL
	// (wrong session), 0 (one was held: nothing is kept) or one token for
	// the whole set, drawn after the last lock was taken (a token drawn
	// later than every earlier grant of each key is greater than theirs).
	// Every try runs once (OFFSET 0 keeps t a subquery of its own) and
	// before the outcome is judged; CASE runs only the branch it takes.
	trySetSQL = `SELECT CASE WHEN ok THEN {token} WHEN NOT ok THEN (SELECT 0 * count(pg_advisory_unlock(id)) FROM unnest(taken) AS id) END
	FROM (SELECT bool_and(ok) AS ok, array_agg(id) FILTER (WHERE ok) AS taken FROM (SELECT id, pg_try_advisory_lock(id) AS ok
	FROM unnest($1::bigint[]) AS id WHERE pg_backend_pid() = $2 OFFSET 0) AS t) AS s`
	// trySlotsSQL tries the slots of a semaphore, the bigint[] $1, in order
	// and stops at the first it takes (a recursive query runs one step at a
	// time, each only after the previous one took nothing), so it holds at
	// most one. It returns NULL (wrong session: nothing tried), 0 (every slot
	// held) or the token, and as a second column the index in $1 of the slot
	// taken by the try, or -1 if none was.
	trySlotsSQL = `WITH RECURSIVE r(i, ok) AS (SELECT 0, false WHERE pg_backend_pid() = $2
	UNION ALL SELECT i + 1, pg_try_advisory_lock(($1::bigint[])[i + 1]) FROM r WHERE NOT ok AND i < cardinality($1::bigint[]))
	SELECT CASE WHEN steps = 0 THEN NULL WHEN at IS NOT NULL THEN {token} {else} END, coalesce(at - 1, -1)
	FROM (SELECT count(*) AS steps, max(i) FILTER (WHERE ok) AS at FROM r) AS s`
	// waitLockSQL blocks in PostgreSQL's lock queue and returns NULL (wrong
	// session) or the token.
	waitLockSQL = `SELECT CASE WHEN pg_backend_pid() <> $2 THEN NULL WHEN pg_advisory_lock($1) IS NOT NULL THEN {token} END`
	// trySlotsSQL's {else}: ELSE 0 for a try; for a wait, every slot held,
	// it blocks in the server's queue of the first slot (index 0, returned
	// as -1: granted by the queue), as waitLockSQL does.
	trySlotsElse  = `ELSE 0`
	waitSlotsElse = `WHEN pg_advisory_lock(($1::bigint[])[1]) IS NOT NULL THEN {token}`

	// unlockSQL returns NULL (wrong session), true, or false when the session
	// did not hold the lock.
	unlockSQL = `SELECT CASE WHEN pg_backend_pid() = $2 THEN pg_advisory_unlock($1) END`
	// unlockPermitSQL is unlockSQL for a permit's slot, which also announces
	// the slot given back to the waiters of other slots (see listen.go), but
	// only if it is left free: the unlock grants the slot at once to a
	// request queued on it, and then the try that follows fails and nobody
	// needs waking. A try that succeeds (nobody was queued) is undone at once
	// by the second unlock; until then, for the length of this statement, a
	// try by another session finds the slot held, as it would have a moment
	// earlier.
	unlockPermitSQL = `SELECT CASE WHEN pg_backend_pid() <> $2 THEN NULL WHEN NOT pg_advisory_unlock($1) THEN false
	WHEN pg_try_advisory_lock($1) THEN (SELECT pg_advisory_unlock($1) FROM pg_notify('` + permitChannel + `', $1::text)) ELSE true END`
	unlockSharedSQL = `SELECT CASE WHEN pg_backend_pid() = $2 THEN pg_advisory_unlock_shared($1) END`

	// unlockAllSQL clears a waiting connection after a cancelled or failed wait,
	// when the lock may have been granted as the wait ended. Waiting connections
	// hold nothing else.
	unlockAllSQL = `SELECT pg_advisory_unlock_all() IS NOT NULL`

	// inUseSQL returns whether any session of this database holds or awaits
	// the advisory lock $1 (read by a permit request that found every permit
	// held, to detect another shape in use on the key).
	inUseSQL = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid)`

	// pingSQL confirms that the session is alive and still the same one.
	pingSQL = `SELECT pg_backend_pid()`

	// setupSQL runs once on a new lock connection: it tags the session with the
	// driver's application_name, reads who and where the session is, and
	// applies session settings ($2, $3: names and values; only those the
	// server knows). synchronous_commit goes back on where it was off, so the
	// fencing sequence's log records are flushed before a token is handed out.
	setupSQL = `SELECT pg_backend_pid(), pg_postmaster_start_time(), pg_is_in_recovery(),
	set_config('application_name', $1, false),
	(SELECT count(set_config(s.name, v.val, false)) FROM unnest($2::text[], $3::text[]) AS v(name, val) JOIN pg_settings s ON s.name = v.name),
	CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'on', false) END`
)

// stmt is one of the statements lock sessions run. Each session prepares it
// under its own name the first time it needs it, so a statement costs a Bind
// and an Execute, with arguments sent in binary (see lockConn.exec).
type stmt struct {
	bit  uint16 // the statement's bit in lockConn.prepared
	name string // the prepared statement's name
	sql  string
	oids []uint32 // parameter types: a prefix of lockParamOIDs
	set  bool     // $1 is a set's lock ids (bigint[], lockConn.ids), not one id
	// slots: $1 is a semaphore's slot ids (set too), of which the statement
	// takes one and returns its index as a second column (result.at).
	slots bool
}

// lockParamOIDs are the types of a statement's parameters $1, $2, $3: the lock
// id (bigint), the backend pid (integer) and the fencing sequence (oid).
var lockParamOIDs = []uint32{pgtype.Int8OID, pgtype.Int4OID, pgtype.OIDOID}

// The statements that draw no token, the same for every Driver.
var (
	unlockStmt       = &stmt{bit: 1 << 0, name: "distlock_unlock", sql: unlockSQL, oids: lockParamOIDs[:2]}
	unlockSharedStmt = &stmt{bit: 1 << 1, name: "distlock_unlock_shared", sql: unlockSharedSQL, oids: lockParamOIDs[:2]}
	unlockAllStmt    = &stmt{bit: 1 << 2, name: "distlock_unlock_all", sql: unlockAllSQL}
	pingStmt         = &stmt{bit: 1 << 3, name: "distlock_ping", sql: pingSQL}
	unlockPermitStmt = &stmt{bit: 1 << 9, name: "distlock_unlock_permit", sql: unlockPermitSQL, oids: lockParamOIDs[:2]}
	inUseStmt        = &stmt{bit: 1 << 8, name: "distlock_in_use", sql: inUseSQL, oids: lockParamOIDs[:1]}
)

// lockStatements are the statements that draw a token, built for one fencing
// sequence (or none).
type lockStatements struct {
	try, tryShared   *stmt
	set, setShared   *stmt // trySetSQL
	wait, waitShared *stmt
	slots, waitSlots *stmt // trySlotsSQL, as a try and as a wait
}

// newLockStatements builds the lock statements, with or without fencing.
func newLockStatements(fencing bool) *lockStatements {
	token, params := "1", lockParamOIDs[:2]
	if fencing {
		token, params = "nextval($3::oid::regclass)", lockParamOIDs
	}
	build := func(bit uint16, name, sql string, shared bool) *stmt {
		if shared {
			sql = sharedSQL.Replace(sql)
			name += "_shared"
		}
		return &stmt{bit: bit, name: name, sql: strings.Replace(sql, "{token}", token, 1), oids: params}
	}
	set := func(bit uint16, shared bool) *stmt {
		s := build(bit, "distlock_try_set", trySetSQL, shared)
		s.oids, s.set = append([]uint32{pgtype.Int8ArrayOID}, params[1:]...), true
		return s
	}
	slots := func(bit uint16, name, els string) *stmt {
		s := set(bit, false)
		s.name, s.slots = name, true
		s.sql = strings.Replace(strings.Replace(trySlotsSQL, "{else}", els, 1), "{token}", token, 2)
		return s
	}
	return &lockStatements{
		try:        build(1<<4, "distlock_try", tryLockSQL, false),
		tryShared:  build(1<<5, "distlock_try", tryLockSQL, true),
		set:        set(1<<10, false),
		setShared:  set(1<<11, true),
		wait:       build(1<<6, "distlock_wait", waitLockSQL, false),
		waitShared: build(1<<7, "distlock_wait", waitLockSQL, true),
		slots:      slots(1<<12, "distlock_try_slots", trySlotsElse),
		waitSlots:  slots(1<<13, "distlock_wait_slots", waitSlotsElse),
	}
}

func (s *lockStatements) tryFor(shared bool) *stmt {
	if shared {
		return s.tryShared
	}
	return s.try
}

// sharedSQL turns a statement on exclusive locks into one on shared locks.
var sharedSQL = strings.NewReplacer("advisory_lock(", "advisory_lock_shared(", "advisory_unlock(", "advisory_unlock_shared(")

func (s *lockStatements) setFor(shared bool) *stmt {
	if shared {
		return s.setShared
	}
	return s.set
}

func (s *lockStatements) waitFor(shared bool) *stmt {
	if shared {
		return s.waitShared
	}
	return s.wait
}

func unlockFor(shared bool) *stmt {
	if shared {
		return unlockSharedStmt
	}
	return unlockStmt
}
