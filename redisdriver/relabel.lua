-- Replaces the label in owner's record if owner holds the key, keeping its
-- token and grant time, and tells the watchers.
--
-- KEYS: as in common.lua, with 7 forced
-- ARGV: 1 owner, 2 label, 3 n (-1: exclusive, 0: shared, N: a permit of N)
-- Returns 1 if owner holds it, 0 if not, 2 if not because ForceRelease evicted
-- owner.

--@common

local owner, label, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local holder = redis.pcall('GET', lock)
if n < 0 then
  if not holds(holder, owner) then return notHeld(owner) end
  if holder ~= owner then
    -- Taken without fencing: the label is in the lock's value.
    redis.call('SET', lock, owner .. '\0' .. label, 'KEEPTTL')
    changed()
    return 1
  end
  local last = redis.pcall('GET', fence)
  if type(last) == 'table' then return 0 end
  local tok, us = string.format('%.0f', tokenOf(last)), '0'
  local t, u, rest = string.match(last or '', '^(%d+) (%d+) (.*)$')
  if t and string.sub(rest, 1, #owner + 1) == owner .. ' ' then us = u end
  -- The record of ours, or (deleted by hand, or a token alone) one with the
  -- token the fence holds, which is ours while we hold the lock.
  local v = tok .. ' ' .. us .. ' ' .. owner .. ' ' .. label
  if last then
    redis.call('SET', fence, v, 'KEEPTTL')
  else
    redis.call('SET', fence, v, 'PX', math.max(redis.call('PTTL', lock), 0) + FENCE_KEEP)
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
