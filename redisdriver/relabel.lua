-- Replaces the label in owner's record if owner holds the key, keeping its
-- token and grant time, and tells the watchers.
--
-- KEYS: as in common.lua
-- ARGV: 1 owner, 2 label, 3 n (-1: exclusive, 0: shared, N: a permit of N)
-- Returns 1 if owner holds it, 0 if not, 2 if not because ForceRelease evicted
-- owner.

--@common

local owner, label, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local holder = redis.pcall('GET', lock)
if n < 0 then
  if holder ~= owner then return notHeld(owner) end
  local rec = redis.pcall('GET', grant)
  local tok, us
  if type(rec) == 'string' and string.sub(rec, 1, #owner + 1) == owner .. ' ' then
    tok, us = string.match(string.sub(rec, #owner + 2), '^(%d+) (%d+) ')
  end
  if tok then
    redis.call('SET', grant, owner .. ' ' .. tok .. ' ' .. us .. ' ' .. label, 'KEEPTTL')
  else
    -- No record of ours (deleted by hand): the fence holds our token.
    local last = redis.pcall('GET', fence)
    if type(last) ~= 'string' then last = '0' end
    local pt = redis.call('PTTL', lock)
    if pt > 0 then redis.call('SET', grant, owner .. ' ' .. last .. ' 0 ' .. label, 'PX', pt) end
  end
else
  if holder ~= markerOf(n) then return notHeld(owner) end
  local sc = redis.call('ZSCORE', holders, owner)
  if not sc then return notHeld(owner) end
  if tonumber(sc) <= clock().ms then return 0 end
  local rec = redis.pcall('HGET', labels, owner)
  local tok, us
  if type(rec) == 'string' then tok, us = string.match(rec, '^(%d+) (%d+) ') end
  redis.call('HSET', labels, owner, (tok or '0') .. ' ' .. (us or '0') .. ' ' .. label)
  atLeast(labels, redis.call('PTTL', lock))
end
changed()
return 1
