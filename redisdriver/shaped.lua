-- Takes a shared hold (n = 0) or one of n permits (n >= 2) and mints its
-- fencing token, or (when an inbox is given) joins the key's wait queue. See
-- "Read-write locks and semaphores" in the package documentation for the rule:
-- a shared request is granted when no exclusive lock is held and no live
-- exclusive request waits ahead of it; a permit when fewer than n live permits
-- are held and no live request waits ahead of it. A request that is not
-- queued is behind every queued one (TryAcquire too: it never passes a
-- waiting writer).
--
-- KEYS: as in common.lua
-- ARGV: 1 owner, 2 TTL ms, 3 n, 4 inbox channel ("": do not queue), 5 queue
--       lease ms, 6 label
-- Returns {1, token}: taken now
--         {2, token, pttl}: already held by owner (a retry after a lost reply,
--                           or a handoff); a new token, larger than all before
--         {0, wait}: not now; wait is when to look again in ms (-1: no hint)
--         {-1}: the lock key holds a value that is not a string
--         {-3, n}: KEYS[n] of this lock holds data of the wrong type
--         {-4}: the key is in use with another shape or number of permits

-- The uncontended path, inline (see acquire.lua's): nobody queues, and the
-- key is free (and no holds are left behind) or held under our marker, not
-- by owner, with a permit free. It reads before it writes, so that data of
-- the wrong type (pcall) leaves the key as it was for the slow path to
-- report; only the fence may have moved on, which no rule minds. The token
-- and the holder's record are those of mint and hold in common.lua.
local fmarker = '\0shared'
if ARGV[3] ~= '0' then fmarker = '\0permits ' .. ARGV[3] end
local cur = redis.pcall('GET', KEYS[1])
local fast = cur == false and redis.call('EXISTS', KEYS[3], KEYS[5]) == 0
if cur == fmarker and redis.call('EXISTS', KEYS[3]) == 0 then
  local hc = redis.pcall('ZCARD', KEYS[5])
  fast = type(hc) == 'number' and (ARGV[3] == '0' or hc < tonumber(ARGV[3])) and not redis.call('ZSCORE', KEYS[5], ARGV[1])
end
if fast then
  local t = redis.call('TIME')
  local s = t[1] .. string.sub('00000' .. t[2], -6)
  local tok, ms, ttl = tonumber(s), tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(ARGV[2])
  local last = redis.pcall('SET', KEYS[2], s, 'KEEPTTL', 'GET')
  if type(last) ~= 'table' then
    local ts = s
    if not last then
      redis.call('PEXPIRE', KEYS[2], ttl + FENCE_KEEP)
    else
      local l = tonumber(string.match(last, '^%d+')) or 0
      if tok <= l then
        tok = l + 1
        ts = string.format('%.0f', tok)
        redis.call('SET', KEYS[2], ts, 'KEEPTTL')
      end
    end
    if type(redis.pcall('HSET', KEYS[6], ARGV[1], ts .. ' ' .. s .. ' ' .. ARGV[6])) == 'number' then
      redis.call('ZADD', KEYS[5], ms + ttl, ARGV[1])
      local pt = -2
      if cur then pt = redis.call('PTTL', KEYS[1]) end
      if pt < ttl then
        redis.call('SET', KEYS[1], fmarker, 'PX', ttl)
        pt = ttl
      end
      redis.call('PEXPIRE', KEYS[5], pt)
      if redis.call('PTTL', KEYS[6]) < pt then redis.call('PEXPIRE', KEYS[6], pt) end
      local w = redis.call('HGET', KEYS[6], '\0watch')
      if w and tonumber(w) > ms then redis.call('PUBLISH', KEYS[1] .. ':watch', '') end
      return {1, tok}
    end
  end
end

--@common

local owner, ttl, n, inbox, lease, label = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6]
local marker = markerOf(n)

local holder = redis.pcall('GET', lock)
if type(holder) == 'table' then return {-1} end
local last = redis.pcall('GET', fence)
if type(last) == 'table' then return {-3, 2} end
local ql = redis.pcall('LLEN', queue)
if type(ql) == 'table' then return {-3, 3} end
local hc = redis.pcall('ZCARD', holders)
if type(hc) == 'table' then return {-3, 5} end
local lt = redis.call('TYPE', labels)
if lt.ok ~= 'hash' and lt.ok ~= 'none' then return {-3, 6} end
if holder and holder ~= marker and (n > 0 or string.byte(holder, 1) == 0) then
  -- Another shape's marker, or a semaphore request on an exclusive lock.
  return {-4}
end

if holder == marker then
  local sc = redis.call('ZSCORE', holders, owner)
  if sc and tonumber(sc) > clock().ms then
    local tok = mint(ttl)
    redis.call('HSET', labels, owner, record(tok, label))
    return {2, tok, tonumber(sc) - clock().ms}
  end
end

-- Is a live request ahead of us that we must not pass?
local blocked, hint = false, -1
for _, w in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  if w == owner then break end
  local e = redis.call('HGET', waiters, w)
  if e then
    local d, wn = parse(e)
    if d and d > clock().ms then
      if (n > 0 or wn > 0) and wn ~= n then return {-4} end
      if n > 0 or wn < 0 then
        blocked, hint = true, d - clock().ms
        break
      end
    end
  end
end

local free = not holder or holder == marker
if free and holder and n > 0 then
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', clock().ms)
  free = redis.call('ZCARD', holders) < n
end
if free and not blocked then
  if redis.call('HDEL', waiters, owner) == 1 then
    redis.call('LREM', queue, 1, owner)
    redis.call('HDEL', labels, owner)
  end
  local tok = mint(ttl)
  hold(marker, owner, ttl, tok, label)
  changed()
  return {1, tok}
end

if inbox ~= '' then
  -- Join the queue, or renew our place in it.
  local shape = 's'
  if n > 0 then shape = 'p' .. n .. '/' end
  local entry = string.format('%s%.0f %d %s', shape, clock().ms + lease, ttl, inbox)
  if redis.call('HSET', waiters, owner, entry) == 1 then
    redis.call('RPUSH', queue, owner)
    redis.call('HSET', labels, owner, '0 0 ' .. label)
  end
  for _, k in ipairs({queue, waiters, labels}) do atLeast(k, 2 * lease) end
end

-- Look again when a hold that keeps us out ends (the exclusive holder's, the
-- earliest permit's), or when the lease of the waiter ahead ends (it may have
-- died), whichever comes first.
local wait = -1
if holder then
  if n > 0 and not free then
    local low = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
    if #low > 0 then wait = tonumber(low[2]) - clock().ms end
  elseif n == 0 and holder ~= marker then
    wait = redis.call('PTTL', lock)
  end
end
if blocked and (wait < 0 or hint < wait) then wait = hint end
return {0, wait}
