-- Takes a shared (read) hold on this server, or (when an inbox is given)
-- records that the driver behind the inbox waits for the key, so that a
-- release on this server tells it. Both happen in one atomic step.
--
-- A shared hold is a member of the holders sorted set, scored by its expiry
-- (ms, server clock); while any exists, the lock key holds the marker
-- "\0shared" (no owner starts with a NUL byte) with the expiry of the latest
-- hold, so an exclusive request (SET NX, this driver's or any Redlock
-- client's) finds the key taken. The hold is granted when the key is free or
-- held shared and no live writer waits here (the writers hash: owner ->
-- deadline of a waiting exclusive request, written by acquire.lua).
--
-- A granted hold's record, "0 since-µs label" (since by the holder's clock,
-- as acquire.lua's), goes into the labels hash under the owner, which lives
-- as long as the holders set; Inspect reads it.
--
-- KEYS: 1 lock, 2 waiters, 3 holders, 4 writers, 5 labels
-- ARGV: 1 owner, 2 TTL ms, 3 the record, "0 since-µs label", 4 inbox channel
--       (absent: do not register), 5 registration lease ms
-- Returns 1: taken now
--         {2, pttl}: already held by owner (a retry after a lost reply)
--         {0, holder, pttl}: not now; holder is the exclusive owner, or
--                            "\0writer" when a waiting writer holds readers
--                            back (pttl: until its registration ends)
--         {-1}: the lock key holds a value that is not a string, not a lock
--         {-3}: another key of the lock holds data of the wrong type
local marker = '\0shared'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then return {-1} end
local busy, pttl = false, 0
if holder and holder ~= marker then
  busy, pttl = holder, redis.call('PTTL', KEYS[1])
else
  if holder then
    local sc = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
    if type(sc) == 'table' then return {-3} end
    if sc and tonumber(sc) > now then return {2, tonumber(sc) - now} end
  end
  local w = redis.pcall('HGETALL', KEYS[4])
  if w.err then return {-3} end
  for i = 1, #w, 2 do
    local dl = tonumber(w[i + 1]) or 0
    if dl > now then
      busy, pttl = '\0writer', math.max(pttl, dl - now)
    else
      redis.call('HDEL', KEYS[4], w[i])
    end
  end
end
if not busy then
  local ttl = tonumber(ARGV[2])
  local pt = redis.call('PTTL', KEYS[1])
  -- A holders set outlives no marker (the marker's expiry is never before
  -- its holds'): one left without it is stale.
  if pt == -2 then redis.call('DEL', KEYS[3], KEYS[5]) end
  if type(redis.pcall('ZADD', KEYS[3], now + ttl, ARGV[1])) == 'table' then return {-3} end
  if type(redis.pcall('HSET', KEYS[5], ARGV[1], ARGV[3])) == 'table' then
    return {-3}
  end
  if pt < ttl then
    redis.call('SET', KEYS[1], marker, 'PX', ttl)
    pt = ttl
  end
  redis.call('PEXPIRE', KEYS[3], pt)
  redis.call('PEXPIRE', KEYS[5], pt)
  return 1
end
if ARGV[4] then
  local lease = tonumber(ARGV[5])
  if type(redis.pcall('HSET', KEYS[2], ARGV[4], string.format('%.0f', now + lease))) == 'table' then
    return {-3}
  end
  if redis.call('PTTL', KEYS[2]) < 2 * lease then redis.call('PEXPIRE', KEYS[2], 2 * lease) end
end
return {0, busy, pttl}
