-- Extends many exclusive locks to a new TTL, each where its owner holds it on
-- this server: automatic refresh's batch in one call (refresh.lua does one
-- lock, and the shared holds). The keys of one call share a Cluster slot when
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
-- KEYS: per lock, 3: lock, grant, forced.
-- ARGV: the locks' TTL ms, their grant records' new TTL ms; then per lock, 2:
--       owner, '1' to extend its grant record too ('0': leave it). (The TTLs
--       once per call, not per lock: the client writes every argument to
--       three servers.)
-- Returns per lock, in order, refresh.lua's answer: 1 if its owner holds it
-- here (extended); 0 if not (another owner, no key, or a value that is not a
-- string); 2 if not because an operator evicted the owner here.
local out = {}
local ttl, recordTTL = ARGV[1], ARGV[2]
for i = 0, #KEYS / 3 - 1 do
  local lock, owner = KEYS[3 * i + 1], ARGV[2 * i + 3]
  if redis.pcall('GETEX', lock, 'PX', ttl) == owner then
    if ARGV[2 * i + 4] == '1' then redis.call('PEXPIRE', KEYS[3 * i + 2], recordTTL) end
    out[#out + 1] = 1
  elseif redis.pcall('HEXISTS', KEYS[3 * i + 3], owner) == 1 then
    out[#out + 1] = 2
  else
    out[#out + 1] = 0
  end
end
return out
