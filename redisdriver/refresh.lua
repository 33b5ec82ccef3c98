-- Extends many exclusive locks to a new TTL, each if its owner holds it, or
-- only checks that each does: automatic refresh's batch in one call. The
-- keys of one call share a Cluster slot (the driver groups them).
--
-- Per lock, one command: GETEX to extend and read the owner (in either layout
-- of the lock's value) at once. Redis has no owner-checked extend in one
-- command before SET ... IFEQ (Redis 8.4, Valkey 8.1), and GET then PEXPIRE
-- costs the server about 1.6 times as much per lock (2.0 against 1.3 us,
-- measured in a script over 256 keys). The price: a refresh that finds
-- another owner in the key (the lock was already lost) has extended that
-- owner's key to this TTL. That never lets a second holder in (the other
-- owner counts its validity from its own grant or refresh; a longer-lived key
-- only keeps others out longer), and it happens once per lost lock, which is
-- then forgotten: at worst, if that owner dies holding, its key lives one TTL
-- longer than it would have. A check-only call (TTL '0') reads with GET.
-- The fence record (which holds the holder's record) is extended only when
-- the driver asks, rarely: see fenceDue in refresh.go.
--
-- KEYS: per lock, 3: lock, fence, forced.
-- ARGV: per lock, 3: owner, TTL ms ('0': check only), the fence record's new
--       TTL ms ('0': leave it).
-- Returns per lock, in order: 1 if its owner holds it, 0 if not because the
-- key is gone, 3 if not because it holds another owner (or a value that is
-- not a string), 2 if not because ForceRelease evicted the owner.
local out = {}
for i = 1, #KEYS, 3 do
  local lock, owner, ttl = KEYS[i], ARGV[i], ARGV[i + 1]
  local v
  if ttl == '0' then
    v = redis.pcall('GET', lock)
  else
    v = redis.pcall('GETEX', lock, 'PX', ttl)
  end
  -- A value of another type is not the owner; any other error (the command
  -- refused, as by an ACL without it) says nothing about the lock: it is the
  -- call's, not "another owner".
  if type(v) == 'table' and v.err and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
    return v
  end
  -- The owner alone, or without fencing the owner, a NUL and the label (see
  -- holds in common.lua).
  if v == owner or (type(v) == 'string' and string.sub(v, 1, #owner + 1) == owner .. '\0') then
    if ttl ~= '0' and ARGV[i + 2] ~= '0' then redis.call('PEXPIRE', KEYS[i + 1], ARGV[i + 2]) end
    out[#out + 1] = 1
  elseif redis.pcall('HEXISTS', KEYS[i + 2], owner) == 1 then
    out[#out + 1] = 2
  elseif v == false then
    out[#out + 1] = 0
  else
    out[#out + 1] = 3
  end
end
return out
