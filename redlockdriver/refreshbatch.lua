-- Extends many exclusive locks to a new TTL, each where its owner holds it on
-- this server, and their grant records: automatic refresh's batch in one call,
-- for the locks whose grant record is due (the others go as plain GETEX
-- commands, which cost the server less: refresh.go; refresh.lua does one lock,
-- and the shared holds). The keys of one call share a Cluster slot when
-- the server is a Cluster (the driver groups them).
--
-- Per lock, one command: GETEX to extend the lock and read its owner at once
-- (GET then PEXPIRE costs the server about 1.6 times as much); and rarely a
-- second, PEXPIRE on its grant record, which outlives the lock and is
-- extended only when the driver finds it due (recordDue in refresh.go). A
-- key that holds another owner (the lock was lost here) has been extended to
-- this TTL too: that never lets a second holder in (its owner counts its
-- validity from its own requests; a longer-lived key only keeps others out
-- longer), as in the single-server driver's refresh.lua. A missing key is
-- never re-created: whether the lock is still held is decided by the
-- majority, not by one server.
--
-- Per lock, only what every call needs crosses the network: its lock key and
-- owner. Its grant record's key comes only when the record is due, and its
-- tombstone (forced) is not read here: the driver asks check.lua about the
-- few locks a refresh finds lost. Three keys and two arguments a lock cost
-- the server 2.36 us a lock, one key and one argument 1.75 us (100,000
-- locks in calls of 256, a server alone on a core): 26 % less.
--
-- KEYS: the n locks; then the grant record of each lock due one, in order.
-- ARGV: the locks' TTL ms, their grant records' new TTL ms, a string with
--       a byte per lock, '1' where its grant record is due ('' when none is);
--       then the n owners. (The TTLs once per call, not per lock: the client
--       writes every argument to three servers.)
-- Returns per lock, in order: 1 if its owner holds it here (extended), 0 if
-- not (another owner, no key, or a value that is not a string).
local out = {}
local ttl, recordTTL, due = ARGV[1], ARGV[2], ARGV[3]
local n = #ARGV - 3
local g = n -- the last grant key taken
for i = 1, n do
  local v = redis.pcall('GETEX', KEYS[i], 'PX', ttl)
  -- A value of another type is not the owner; any other error (GETEX
  -- refused) says nothing about the lock: it is the call's, as in refresh.go.
  if type(v) == 'table' and v.err and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
    return v
  end
  local held = v == ARGV[i + 3]
  if string.byte(due, i) == 49 then -- '1'
    g = g + 1
    if held then redis.call('PEXPIRE', KEYS[g], recordTTL) end
  end
  out[i] = held and 1 or 0
end
return out
