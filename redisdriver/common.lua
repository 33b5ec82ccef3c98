-- Included by acquire.lua and release.lua after their fast paths, so an
-- uncontended call never pays for defining these: the server clock, the
-- fencing counter and the wait queue of one lock. The key layout is described
-- in keys.go.
--
-- KEYS: 1 lock, 2 fence, 3 queue, 4 waiters, 5 holders (the shaped holds'
-- sorted set; absent in acquire.lua, which never grants one)
local lock, fence, queue, waiters, holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- While shared or permit holds exist the lock key holds a marker instead of an
-- owner (so that exclusive requests, ours and standard SET NX clients', find
-- the key taken), with the expiry of the latest hold; the holds themselves are
-- the members of holders, scored by their expiry (ms). A marker starts with a
-- NUL byte, which no owner of this driver does. n = 0: shared; n >= 2: a
-- semaphore of n permits.
local function markerOf(n)
  if n == 0 then return '\0shared' end
  return '\0permits ' .. n
end

local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    now = {us = us, ms = math.floor(us / 1000)}
  end
  return now
end

-- mint records and returns the next fencing token, as the fast path of
-- acquire.lua does inline.
local function mint(ttl)
  local tok = clock().us
  local last = redis.call('SET', fence, tok, 'KEEPTTL', 'GET')
  if not last then
    redis.call('PEXPIRE', fence, ttl + FENCE_KEEP)
  elseif tok <= (tonumber(last) or 0) then
    tok = last + 1
    redis.call('SET', fence, tok, 'KEEPTTL')
  end
  return tok
end

-- parse reads a waiter's entry: "D T inbox" for an exclusive request, "sD T
-- inbox" for a shared one, "pN/D T inbox" for a permit of N; D is the lease's
-- deadline (ms), T the TTL (ms). It returns the deadline, the shape (-1:
-- exclusive, 0: shared, N: permits), the TTL and the inbox, or nil.
local function parse(e)
  local n, rest = -1, e
  local c = string.sub(e, 1, 1)
  if c == 's' then
    n, rest = 0, string.sub(e, 2)
  elseif c == 'p' then
    local pn, r = string.match(e, '^p(%d+)/(.*)$')
    if not pn then return nil end
    n, rest = tonumber(pn), r
  end
  local d, ttl, inbox = string.match(rest, '^(%d+) (%d+) (.*)$')
  if not d then return nil end
  return tonumber(d), n, tonumber(ttl), inbox
end

-- first returns the first waiter whose lease has not run out, with the lease's
-- deadline and its entry, dropping the dead waiters before it.
local function first()
  while true do
    local w = redis.call('LINDEX', queue, 0)
    if not w then return false end
    local e = redis.call('HGET', waiters, w)
    if e then
      local deadline = parse(e)
      if deadline and deadline > clock().ms then return w, deadline, e end
    end
    redis.call('LPOP', queue)
    redis.call('HDEL', waiters, w)
  end
end

-- hold records a shared or permit hold of w for ttl ms under marker, making
-- the lock key the marker with the latest expiry of all holds. A lock key that
-- is gone takes the holds with it (its expiry is never before theirs), so a
-- holders set left behind is dropped first.
local function hold(marker, w, ttl)
  local pt = redis.call('PTTL', lock)
  if pt == -2 then redis.call('DEL', holders) end
  redis.call('ZADD', holders, clock().ms + ttl, w)
  if pt < ttl then
    redis.call('SET', lock, marker, 'PX', ttl)
    pt = ttl
  end
  -- Always: the ZADD may have made the set anew (an emptied set is deleted).
  redis.call('PEXPIRE', holders, pt)
end

-- settle drops the expired holds, and deletes the marker when none is left or
-- moves its expiry to the latest hold's.
local function settle()
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', clock().ms)
  local top = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  if #top == 0 then
    redis.call('DEL', lock, holders)
    return
  end
  local at = string.format('%.0f', tonumber(top[2]))
  redis.call('PEXPIREAT', lock, at)
  redis.call('PEXPIREAT', holders, at)
end

-- handoff grants the key to the waiters at the head of the queue that it can
-- take now: an exclusive waiter when the key is free; a shared one, and every
-- shared one right behind it, when no exclusive lock is held; permit waiters
-- while permits are free. Each is told on its inbox channel: "<owner> <token>".
local function handoff()
  while true do
    local w, _, e = first()
    if not w then return end
    local _, n, ttl, inbox = parse(e)
    local holder = redis.pcall('GET', lock)
    if type(holder) == 'table' then return end -- not a lock: left untouched
    if n < 0 then
      if holder then return end
      redis.call('LPOP', queue)
      redis.call('HDEL', waiters, w)
      redis.call('SET', lock, w, 'PX', ttl)
    else
      local marker = markerOf(n)
      if holder and holder ~= marker then return end
      if holder and n > 0 then
        redis.call('ZREMRANGEBYSCORE', holders, '-inf', clock().ms)
        if redis.call('ZCARD', holders) >= n then return end
      end
      redis.call('LPOP', queue)
      redis.call('HDEL', waiters, w)
      hold(marker, w, ttl)
    end
    local tok = mint(ttl)
    redis.call('PUBLISH', inbox, w .. ' ' .. string.format('%.0f', tok))
    if n < 0 then return end
  end
end
