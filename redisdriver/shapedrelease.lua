-- Gives back a shared hold or a permit if owner holds it and hands what it
-- frees to the waiters it can serve; or, for an owner that is waiting, gives up
-- its place in the queue.
--
-- KEYS: as in common.lua
-- ARGV: 1 owner, 2 n (0: shared)
-- Returns 1 if owner held it (and its hold had not expired), 0 if not.

--@common

local owner = ARGV[1]
local marker = markerOf(tonumber(ARGV[2]))
local holder = redis.pcall('GET', lock)
if holder == marker then
  local sc = redis.call('ZSCORE', holders, owner)
  if sc then
    redis.call('ZREM', holders, owner)
    redis.call('HDEL', labels, owner)
    local held = 0
    if tonumber(sc) > clock().ms then held = 1 end
    settle(tonumber(sc))
    handoff()
    changed()
    return held
  end
end
-- Not held (or its member deleted by hand): its record, if left, goes too.
redis.call('HDEL', labels, owner)
if redis.call('HDEL', waiters, owner) == 1 then
  redis.call('LREM', queue, 1, owner)
  if handoff() then changed() end
end
return 0
