-- Included by acquire.lua and release.lua after their fast paths, so an
-- uncontended call never pays for defining these: the server clock, the
-- fencing counter and the wait queue of one lock. The key layout is described
-- in keys.go.
--
-- KEYS: 1 lock, 2 fence, 3 queue, 4 waiters
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

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

-- first returns the first waiter whose lease has not run out, with the lease's
-- deadline and its entry, dropping the dead waiters before it.
local function first()
  while true do
    local w = redis.call('LINDEX', queue, 0)
    if not w then return false end
    local e = redis.call('HGET', waiters, w)
    if e then
      local deadline = tonumber(string.match(e, '^(%d+)'))
      if deadline and deadline > clock().ms then return w, deadline, e end
    end
    redis.call('LPOP', queue)
    redis.call('HDEL', waiters, w)
  end
end

-- handoff gives the free lock to the first live waiter, with that waiter's TTL,
-- and tells its client on the waiter's inbox channel: "<owner> <token>".
local function handoff()
  local w, _, e = first()
  if not w then return end
  local _, ttl, inbox = string.match(e, '^(%d+) (%d+) (.*)$')
  redis.call('LPOP', queue)
  redis.call('HDEL', waiters, w)
  redis.call('SET', lock, w, 'PX', ttl)
  local tok = mint(tonumber(ttl))
  redis.call('PUBLISH', inbox, w .. ' ' .. string.format('%.0f', tok))
end
