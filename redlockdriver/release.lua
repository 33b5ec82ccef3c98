-- Deletes the lock if owner holds it on this server (its shared hold, when
-- the key is held shared) and, when asked to, tells the drivers registered as
-- waiting for it (PUBLISH on each live inbox; dead registrations are dropped)
-- if the key is now free. The releasing driver's own inbox is told only when
-- no other driver waits: the lock passes to another driver rather than back
-- to the one that let it go, so one driver contends for it, not two.
-- Optionally removes one inbox's registration, and the owner's entry as a
-- waiting writer (the request ended): the readers it held back are then told
-- (whatever ARGV[2] says) unless the key is held exclusively.
--
-- The holder's record (grant key, or its entry in labels) goes with its hold.
--
-- KEYS: 1 lock, 2 waiters, 3 holders, 4 writers, 5 grant, 6 labels
-- ARGV: 1 owner, 2 "1" to notify waiters, "0" not to (a partial grant given
--       back after a lost vote: the lock is not free), 3 inbox to unregister
--       ("" for none), 4 the releasing driver's own inbox ("" for none),
--       5 "1" when the request ended (drop its waiting-writer entry)
-- Returns 1 if owner held the lock here, 0 if not.
local r = 0
local free = false
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[5])
  r, free = 1, true
elseif holder == '\0shared' then
  local sc = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
  if type(sc) == 'string' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.pcall('HDEL', KEYS[6], ARGV[1])
    if tonumber(sc) > now then r = 1 end
    -- Drop the expired holds and their records; the marker ends with the
    -- last live one.
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
      redis.pcall('HDEL', KEYS[6], m)
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    local top = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    if #top == 0 then
      redis.call('DEL', KEYS[1], KEYS[3], KEYS[6])
      free = true
    else
      local at = string.format('%.0f', tonumber(top[2]))
      redis.call('PEXPIREAT', KEYS[1], at)
      redis.call('PEXPIREAT', KEYS[3], at)
      redis.pcall('PEXPIREAT', KEYS[6], at)
    end
  end
end
if r == 0 then
  -- Not held here (its lock key expired, deleted by hand, or never taken):
  -- drop what may be left of the owner's record.
  local rec = redis.pcall('GET', KEYS[5])
  if type(rec) == 'string' and string.sub(rec, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
    redis.call('DEL', KEYS[5])
  end
  redis.pcall('HDEL', KEYS[6], ARGV[1])
end
if ARGV[3] ~= '' then redis.pcall('HDEL', KEYS[2], ARGV[3]) end
local tell = free and ARGV[2] == '1'
if ARGV[5] == '1' and redis.pcall('HDEL', KEYS[4], ARGV[1]) == 1 then
  -- A waiting writer that ended (gave up, or released after its turn): the
  -- readers it held back may go, unless the key is held exclusively.
  -- A key this call freed needs no second look.
  if not (tell or free) then
    local h = redis.pcall('GET', KEYS[1])
    tell = not h or h == '\0shared'
  else
    tell = true
  end
end
if tell then
  local w = redis.pcall('HGETALL', KEYS[2])
  if type(w) == 'table' and #w > 0 and not w.err then
    local t = redis.call('TIME')
    local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local own = false
    local told = 0
    for i = 1, #w, 2 do
      if tonumber(w[i + 1]) <= ms then
        redis.call('HDEL', KEYS[2], w[i])
      elseif w[i] == ARGV[4] then
        own = true
      else
        redis.call('PUBLISH', w[i], KEYS[1])
        told = told + 1
      end
    end
    if own and told == 0 then redis.call('PUBLISH', ARGV[4], KEYS[1]) end
  end
end
return r
