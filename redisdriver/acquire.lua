-- Takes the lock with SET NX PX and mints its fencing token, or (when an inbox
-- is given) joins the lock's wait queue. Waiters are served in arrival order:
-- while anyone waits, the lock is only taken by the first live waiter, or handed
-- to it by release.lua.
--
-- ARGV: 2 owner, 3 TTL ms, 4 inbox channel ("" to try once without queueing),
--       5 queue lease ms (a waiter that does not renew its place within it loses it)
-- Returns {1, token}: taken now
--         {2, token, pttl}: already held by owner (a retry after a lost reply, or a
--                           handoff), with its remaining TTL
--         {0, wait}: held by another owner, or kept for a waiter ahead; wait is
--                    when to look again in ms (-1: no expiry in sight)
--         {-1}: the lock key holds a value that is not a string, not a lock
--         {-3, n}: KEYS[n] of this lock holds data of the wrong type
local owner, ttl, inbox, lease = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])

-- Refuse foreign data before writing anything.
local n = redis.pcall('LLEN', queue)
if type(n) == 'table' then return {-3, 3} end
local last = redis.pcall('GET', fence)
if type(last) == 'table' then return {-3, 2} end

if n == 0 and redis.call('SET', lock, owner, 'NX', 'PX', ttl) then
  return {1, mint(ttl, last)}
end

local holder = redis.pcall('GET', lock)
if type(holder) == 'table' then return {-1} end
if holder == owner then
  -- The fence record holds our token, since no one else can have been granted
  -- the lock while it held us; mint again only if it was deleted meanwhile.
  local tok = tonumber(last)
  if not tok then tok = mint(ttl, last) end
  return {2, tok, redis.call('PTTL', lock)}
end

local w, deadline = first()
if not holder and (not w or w == owner) then
  if w then
    redis.call('LPOP', queue)
    redis.call('HDEL', waiters, owner)
  end
  redis.call('SET', lock, owner, 'PX', ttl)
  return {1, mint(ttl, last)}
end

if inbox ~= '' then
  -- Join the queue, or renew our place in it.
  local entry = string.format('%.0f %d %s', clock().ms + lease, ttl, inbox)
  if redis.call('HSET', waiters, owner, entry) == 1 then
    redis.call('RPUSH', queue, owner)
  end
  for _, k in ipairs({queue, waiters}) do
    if redis.call('PTTL', k) < 2 * lease then redis.call('PEXPIRE', k, 2 * lease) end
  end
end

-- Look again when the holder's TTL ends, or, when the lock is free but kept for
-- a waiter ahead, when that waiter's lease ends (it may have died).
if holder then return {0, redis.call('PTTL', lock)} end
if w ~= owner then return {0, deadline - clock().ms} end
return {0, -1}
