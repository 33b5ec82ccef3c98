-- Takes the locks of a set (TryAcquireSet) at once: every one, or none. Each
-- lock is first checked as a request that respects the queue without joining
-- it (Acquire's first try: acquire.lua with inbox "", shaped.lua): a live
-- waiter that such a request may not pass, a holder, another shape, or data
-- of the wrong type refuses the set. Only when every lock may be taken are
-- they all taken, as those scripts take one, so a refused set changes nothing
-- a holder, a waiter or Inspect sees (the checks drop only expired permit
-- holds, as shaped.lua does). The set's owners are new (package lock never
-- retries a set), so a key that holds one is held like any other.
--
-- KEYS: per lock, the 6 of common.lua, lock after lock
-- ARGV: 1 "1": exclusive locks take the layout without fencing (the owner, a
--       NUL and the label in the lock's value, as plain.lua), else ""; then
--       per lock 4: owner, TTL ms, n (-1 exclusive, 0 shared, N permits),
--       label
-- Returns {1, token...}: every lock taken, with its token (0 without fencing)
--         {0, i, reply}: nothing taken, because of lock i: reply is what
--                        acquire.lua answers of it ({0, -1}: busy; or an error)

-- The uncontended path, inline as acquire.lua's: every request exclusive,
-- every lock free and nobody queuing or watching (one EXISTS over all their
-- lock, queue and labels keys), the fence records read by one MGET (which
-- answers nil for data of another type: a fence key found so is asked its
-- TYPE). The tokens are minted as acquire.lua mints one, from one TIME.
local count, plain, free, fences = #KEYS / 6, ARGV[1] == '1', {}, {}
for i = 1, count do
  if ARGV[4 * i] ~= '-1' then free = nil break end
  local b = 6 * i - 6
  free[3 * i - 2], free[3 * i - 1], free[3 * i], fences[i] = KEYS[b + 1], KEYS[b + 3], KEYS[b + 6], KEYS[b + 2]
end
if free and redis.call('EXISTS', unpack(free)) == 0 then
  local last = {}
  if not plain then
    last = redis.call('MGET', unpack(fences))
    for i = 1, count do
      if not last[i] and redis.call('TYPE', fences[i]).ok ~= 'none' then return {0, i, {-3, 2}} end
    end
  end
  local t = redis.call('TIME')
  local s = t[1] .. string.sub('00000' .. t[2], -6)
  local us, toks = tonumber(s), {1}
  for i = 1, count do
    local lock, fence, owner, ttl, label = KEYS[6 * i - 5], fences[i], ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i + 1]
    local tok = 0
    if plain then
      redis.call('SET', lock, owner .. '\0' .. label, 'PX', ttl)
    else
      redis.call('SET', lock, owner, 'PX', ttl)
      tok = us
      local ts, l = s, last[i] and tonumber(string.match(last[i], '^%d+')) or 0
      if tok <= l then
        tok = l + 1
        ts = string.format('%.0f', tok)
      end
      redis.call('SET', fence, ts .. ' ' .. s .. ' ' .. owner .. ' ' .. label, 'KEEPTTL')
      if not last[i] then redis.call('PEXPIRE', fence, ttl + FENCE_KEEP) end
    end
    toks[i + 1] = tok
  end
  return toks
end

--@common

local function use(i)
  local b = 6 * (i - 1)
  lock, fence, queue, waiters, holders, labels = KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5], KEYS[b + 6]
end

-- check answers nil when the lock in use may be granted now to a newcomer of
-- shape n, with whether it is quiet (nobody queues, holds shared or watches:
-- no labels), else the reply that says why not.
local function check(n)
  local ft = redis.call('TYPE', fence).ok
  if ft ~= 'string' and ft ~= 'none' then return {-3, 2} end
  if redis.call('EXISTS', lock, queue, labels) == 0 then return nil, true end
  local holder = redis.pcall('GET', lock)
  if type(holder) == 'table' then return {-1} end
  if type(redis.pcall('LLEN', queue)) == 'table' then return {-3, 3} end
  if type(redis.pcall('ZCARD', holders)) == 'table' then return {-3, 5} end
  local lt = redis.call('TYPE', labels).ok
  if lt ~= 'hash' and lt ~= 'none' then return {-3, 6} end
  if holder and (n < 0 or holder ~= markerOf(n)) then
    if n > 0 or (n == 0 and string.byte(holder, 1) == 0) or (n < 0 and string.sub(holder, 1, 9) == '\0permits ') then
      return {-4}
    end
    return {0, -1}
  end
  -- The waiters a newcomer may not pass: any, but a shared request passes
  -- shared ones only.
  for _, w in ipairs(redis.call('LRANGE', queue, 0, -1)) do
    local d, wn = parse(redis.call('HGET', waiters, w) or '')
    if d and d > clock().ms then
      if n >= 0 and (n > 0 or wn > 0) and wn ~= n then return {-4} end
      if n ~= 0 or wn < 0 then return {0, -1} end
    end
  end
  if holder and n > 0 then
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', clock().ms)
    if redis.call('ZCARD', holders) >= n then return {0, -1} end
  end
  return nil, lt == 'none'
end

local quiet = {}
for i = 1, count do
  use(i)
  local reply, q = check(tonumber(ARGV[4 * i]))
  if reply then return {0, i, reply} end
  quiet[i] = q
end
local toks = {1}
for i = 1, count do
  use(i)
  local owner, ttl, n, label = ARGV[4 * i - 2], tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i]), ARGV[4 * i + 1]
  local tok = 0
  if n >= 0 then
    tok = mint(ttl)
    hold(markerOf(n), owner, ttl, tok, label)
  elseif plain then
    redis.call('SET', lock, owner .. '\0' .. label, 'PX', ttl)
  else
    tok = grantLock(owner, ttl, label)
  end
  if not quiet[i] then changed() end
  toks[i + 1] = tok
end
return toks
