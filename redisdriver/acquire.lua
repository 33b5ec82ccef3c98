-- Takes the lock with SET NX PX and mints its fencing token, or (when an inbox
-- is given) joins the lock's wait queue. Waiters are served in arrival order: a
-- release hands the lock to the first live waiter, and while anyone waits a free
-- lock (its holder vanished) is taken only by the first live waiter. A try
-- without inbox never queues and takes any free lock.
--
-- KEYS: as in common.lua (1 lock, 2 fence, 3 queue, ..., 6 labels)
-- ARGV: 1 owner, 2 TTL ms, 3 label, 4 inbox channel (absent: try once, take any
--       free lock, never queue; "": the same, but respecting the queue as a
--       waiter would), 5 queue lease ms (a waiter that does not renew its place
--       within it loses it)
-- Returns token (an integer): taken now
--         {2, token, pttl}: already held by owner (a retry after a lost reply, or a
--                           handoff), with its remaining TTL
--         {0, wait}: held by another owner, or kept for a waiter ahead; wait is
--                    when to look again in ms (-1: no expiry in sight)
--         {-1}: the lock key holds a value that is not a string, not a lock
--         {-3, n}: KEYS[n] of this lock holds data of the wrong type
--         {-4}: the key is a semaphore (see shaped.lua)

-- The uncontended path, inline: the key is free and (for a waiter) nobody
-- queues. The token is one more than the last one, and never less than the
-- server clock in microseconds, so tokens keep increasing when the fence record
-- is gone (a restart without persistence, a failover to a replica that had not
-- seen it, a day after the record was made). One SET ... GET reads and writes
-- it, together with the holder's record that Inspect reads ("token since-µs
-- owner label"); KEEPTTL spares an expiry update, so the record keeps the
-- expiry it was made with. Watchers, if any (their deadline in labels), are
-- told.
--
-- On the server, each command a script calls costs about as much as the
-- Lua around it, and string.format of a 16-digit number about as much as a
-- command, so this path calls and formats as little as it can: a waiter's
-- one EXISTS asks at once whether anyone queues or watches (labels also holds
-- shaped holders' records and waiters' labels: when it exists, the queue is
-- asked again alone, and the watchers' deadline read); the clock's digits are
-- joined as TIME gives them (the seconds, then the microseconds padded to
-- six) rather than formatted from a number.
local quiet = ARGV[4] and redis.call('EXISTS', KEYS[3], KEYS[6]) == 0
if (not ARGV[4] or quiet or redis.call('EXISTS', KEYS[3]) == 0) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
  local s = t[1] .. string.sub('00000' .. t[2], -6)
  local us = tonumber(s)
  local tok = us
  local rec = ' ' .. s .. ' ' .. ARGV[1] .. ' ' .. ARGV[3]
  local last = redis.pcall('SET', KEYS[2], s .. rec, 'KEEPTTL', 'GET')
  if type(last) == 'table' then
    redis.call('DEL', KEYS[1])
    return {-3, 2}
  end
  if not last then
    redis.call('PEXPIRE', KEYS[2], ARGV[2] + FENCE_KEEP)
  else
    local l = tonumber(string.match(last, '^%d+')) or 0
    if tok <= l then
      tok = l + 1
      redis.call('SET', KEYS[2], string.format('%.0f', tok) .. rec, 'KEEPTTL')
    end
  end
  if not quiet then
    local w = redis.pcall('HGET', KEYS[6], '\0watch')
    if type(w) == 'string' and tonumber(w) * 1000 > us then redis.call('PUBLISH', KEYS[1] .. ':watch', '') end
  end
  return tok
end

--@common

local owner, ttl, label, inbox, lease = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])

local holder = redis.pcall('GET', lock)
if type(holder) == 'table' then return {-1} end
-- The key is a semaphore: an exclusive request is a mismatch (the shared
-- marker is just a busy lock).
if holder and string.sub(holder, 1, 9) == '\0permits ' then return {-4} end
local last = redis.pcall('GET', fence)
if type(last) == 'table' then return {-3, 2} end
local n = redis.pcall('LLEN', queue)
if type(n) == 'table' then return {-3, 3} end
local lt = redis.call('TYPE', labels)
if lt.ok ~= 'hash' and lt.ok ~= 'none' then return {-3, 6} end
if holds(holder, owner) then
  -- Taken without fencing (plain.lua): no token to report.
  if holder ~= owner then return {2, 0, redis.call('PTTL', lock)} end
  -- The fence record holds our token, since no one else can have been granted
  -- the lock while it held us; mint again only if it was deleted meanwhile.
  local tok = tokenOf(last)
  if tok == 0 then tok = mint(ttl, owner, label) end
  return {2, tok, redis.call('PTTL', lock)}
end

local w, deadline = first()
if not holder and (not w or w == owner) then
  if w then
    redis.call('LPOP', queue)
    redis.call('HDEL', waiters, owner)
    redis.call('HDEL', labels, owner)
  end
  local tok = grantLock(owner, ttl, label)
  changed()
  return {1, tok}
end

if inbox and inbox ~= '' then
  -- Join the queue, or renew our place in it.
  local entry = string.format('%.0f %d %s', clock().ms + lease, ttl, inbox)
  if redis.call('HSET', waiters, owner, entry) == 1 then
    redis.call('RPUSH', queue, owner)
    redis.call('HSET', labels, owner, '0 0 ' .. label)
  end
  for _, k in ipairs({queue, waiters, labels}) do atLeast(k, 2 * lease) end
end

-- Look again when the holder's TTL ends, or, when the lock is free but kept for
-- a waiter ahead, when that waiter's lease ends (it may have died).
if holder then return {0, redis.call('PTTL', lock)} end
if w ~= owner then return {0, deadline - clock().ms} end
return {0, -1}
