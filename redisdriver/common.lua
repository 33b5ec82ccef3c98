-- Included by the scripts that may grant, release or describe a lock (all but
-- the refresh scripts), after their fast paths, so an uncontended call never
-- pays for defining these: the server clock, the fencing counter, the wait
-- queue and the holders' records of one lock. The key layout is described in
-- internal/redislayout.
--
-- KEYS: 1 lock, 2 fence (the last token, and the exclusive holder's record),
-- 3 queue, 4 waiters, 5 holders (the shaped holds' sorted set), 6 labels (the
-- shaped holders' records, the waiters' labels, the watchers' deadline),
-- 7 forced (tombstones of evicted owners; only force.lua and relabel.lua have
-- it)
local lock, fence, queue, waiters, holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local labels, forced = KEYS[6], KEYS[7]

-- The field of labels that holds the watchers' deadline (ms): no owner starts
-- with a NUL byte.
local WATCH = '\0watch'

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

-- An exclusive lock's value is its owner alone, or (taken by a driver
-- without fencing, see plain.lua) its owner, a NUL byte and its label: no
-- owner is empty or holds a NUL, so the owner is the part before the first
-- NUL and a marker (which starts with one) is no owner's.
--
-- holds tells whether the lock value v is owner's, in either layout.
local function holds(v, owner)
  return v == owner or (type(v) == 'string' and string.sub(v, 1, #owner + 1) == owner .. '\0')
end

-- split returns the owner of the lock value v and, in the layout without
-- fencing, its label (nil in the other).
local function split(v)
  local i = string.find(v, '\0', 2, true)
  if not i then return v, nil end
  return string.sub(v, 1, i - 1), string.sub(v, i + 1)
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

-- atLeast makes key live at least ms from now (it never shortens its life).
local function atLeast(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end

-- changed tells the watchers of the lock, if any, that its holders changed,
-- on the channel named after the lock key (a channel, not a key).
local function changed()
  local w = redis.pcall('HGET', labels, WATCH)
  if type(w) == 'string' and tonumber(w) > clock().ms then redis.call('PUBLISH', lock .. ':watch', '') end
end

-- notHeld is what the relabel script answers for an owner that does not hold
-- the key: 2 if ForceRelease evicted it (its tombstone is in forced), else 0.
local function notHeld(owner)
  if redis.pcall('HEXISTS', forced, owner) == 1 then return 2 end
  return 0
end

-- tokenOf reads the token at the head of a fence record, or 0.
local function tokenOf(v)
  if type(v) ~= 'string' then return 0 end
  return tonumber(string.match(v, '^%d+')) or 0
end

-- mint records and returns the next fencing token, as the fast path of
-- acquire.lua does inline. For an exclusive grant (owner given) the fence
-- record also holds its record: "token since-µs owner label".
local function mint(ttl, owner, label)
  local tok = clock().us
  local rec = ''
  if owner then rec = string.format(' %.0f ', clock().us) .. owner .. ' ' .. label end
  local last = redis.call('SET', fence, string.format('%.0f', tok) .. rec, 'KEEPTTL', 'GET')
  if not last then
    redis.call('PEXPIRE', fence, ttl + FENCE_KEEP)
  elseif tok <= tokenOf(last) then
    tok = tokenOf(last) + 1
    redis.call('SET', fence, string.format('%.0f', tok) .. rec, 'KEEPTTL')
  end
  return tok
end

-- record is a shaped holder's record: "token since-µs label".
local function record(tok, label)
  return string.format('%.0f %.0f ', tok, clock().us) .. label
end

-- takeLabel removes and returns the label a waiter left in labels when it
-- joined the queue ("0 0 label"), or "".
local function takeLabel(w)
  local e = redis.call('HGET', labels, w)
  if not e then return '' end
  redis.call('HDEL', labels, w)
  return string.match(e, '^%d+ %d+ (.*)$') or ''
end

-- grantLock makes w the exclusive holder for ttl ms, with its record, and
-- returns its token.
local function grantLock(w, ttl, label)
  redis.call('SET', lock, w, 'PX', ttl)
  return mint(ttl, w, label)
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
    redis.call('HDEL', labels, w)
  end
end

-- dropRecords deletes the records of shaped holders that are gone.
local function dropRecords(gone)
  for i = 1, #gone, 1000 do
    redis.call('HDEL', labels, unpack(gone, i, math.min(i + 999, #gone)))
  end
end

-- hold records a shared or permit hold of w for ttl ms under marker, with its
-- record (token tok, label), making the lock key the marker with the latest
-- expiry of all holds. A lock key that is gone takes the holds with it (its
-- expiry is never before theirs), so a holders set left behind is dropped
-- first. labels lives at least as long as the lock key.
local function hold(marker, w, ttl, tok, label)
  local pt = redis.call('PTTL', lock)
  if pt == -2 then
    dropRecords(redis.call('ZRANGE', holders, 0, -1))
    redis.call('DEL', holders)
  end
  redis.call('ZADD', holders, clock().ms + ttl, w)
  if pt < ttl then
    redis.call('SET', lock, marker, 'PX', ttl)
    pt = ttl
  end
  -- Always: the ZADD may have made the set anew (an emptied set is deleted).
  redis.call('PEXPIRE', holders, pt)
  redis.call('HSET', labels, w, record(tok, label))
  atLeast(labels, pt)
end

-- settle drops the expired holds, and deletes the marker when none is left or
-- moves its expiry to the latest hold's. gone is the expiry of the hold just
-- given back: the marker's is the latest hold's, so it moves only if gone was
-- the latest.
local function settle(gone)
  local old = redis.call('ZRANGEBYSCORE', holders, '-inf', clock().ms)
  if #old > 0 then
    dropRecords(old)
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', clock().ms)
  end
  local top = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  if #top == 0 then
    redis.call('DEL', lock, holders)
    return
  end
  if #old == 0 and gone < tonumber(top[2]) then return end
  local at = string.format('%.0f', tonumber(top[2]))
  redis.call('PEXPIREAT', lock, at)
  redis.call('PEXPIREAT', holders, at)
end

-- handoff grants the key to the waiters at the head of the queue that it can
-- take now: an exclusive waiter when the key is free; a shared one, and every
-- shared one right behind it, when no exclusive lock is held; permit waiters
-- while permits are free. Each is told on its inbox channel: "<owner> <token>".
-- It returns whether it granted anything.
local function handoff()
  local granted, count = false, nil -- count: the permits held, once known
  while true do
    local w, _, e = first()
    if not w then return granted end
    local _, n, ttl, inbox = parse(e)
    local holder = redis.pcall('GET', lock)
    if type(holder) == 'table' then return granted end -- not a lock: left untouched
    local tok
    if n < 0 then
      if holder then return granted end
      redis.call('LPOP', queue)
      redis.call('HDEL', waiters, w)
      tok = grantLock(w, ttl, takeLabel(w))
    else
      local marker = markerOf(n)
      if holder and holder ~= marker then return granted end
      if holder and n > 0 and not count then
        dropRecords(redis.call('ZRANGEBYSCORE', holders, '-inf', clock().ms))
        redis.call('ZREMRANGEBYSCORE', holders, '-inf', clock().ms)
        count = redis.call('ZCARD', holders)
      end
      if count and count >= n then return granted end
      redis.call('LPOP', queue)
      redis.call('HDEL', waiters, w)
      local label = takeLabel(w)
      tok = mint(ttl)
      hold(marker, w, ttl, tok, label)
      -- hold dropped the holds of a lock key that was gone.
      if n > 0 then count = (holder and count or 0) + 1 end
    end
    granted = true
    redis.call('PUBLISH', inbox, w .. ' ' .. string.format('%.0f', tok))
    if n < 0 then return granted end
  end
end
