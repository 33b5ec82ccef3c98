-- Extends many exclusive locks to a new TTL, each if its owner holds it, or
-- only checks that each does: automatic refresh's batch in one call. The
-- keys of one call share a Cluster slot (the driver groups them).
--
-- Per lock, two commands: GET to compare the owner (in either layout of the
-- lock's value), PEXPIRE to extend.
-- Redis has no owner-checked extend in one command before SET ... IFEQ
-- (Redis 8.4, Valkey 8.1). The fence record (which holds the holder's record)
-- is extended only when the driver asks, rarely: see fenceDue in refresh.go.
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
  local v = redis.pcall('GET', lock)
  -- The owner alone, or without fencing the owner, a NUL and the label (see
  -- holds in common.lua).
  if v == owner or (type(v) == 'string' and string.sub(v, 1, #owner + 1) == owner .. '\0') then
    if ttl ~= '0' then
      redis.call('PEXPIRE', lock, ttl)
      if ARGV[i + 2] ~= '0' then redis.call('PEXPIRE', KEYS[i + 1], ARGV[i + 2]) end
    end
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
