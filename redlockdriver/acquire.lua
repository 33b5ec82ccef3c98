-- Takes the lock on this server with SET NX PX, or (when an inbox is given)
-- records that the driver behind the inbox waits for the lock, so that a
-- release on this server tells it. Both happen in one atomic step, so no
-- release can slip in between the look and the registration.
--
-- A registering (waiting) request also records its owner in the writers hash
-- (owner -> deadline of the registration, ms, server clock): while it is live,
-- shared requests are not granted on this server (writer preference, see
-- shared.lua); release.lua removes it when the request ends.
--
-- Taking the lock also writes the holder's record beside it, in the grant key
-- with a TTL longer than the lock's (ARGV[4], so refreshes need not extend it
-- each time: see recordDue in refresh.go): "owner 0 since-µs label" (0: no fencing token; since
-- by the holder's clock, when its round began: the server's TIME would cost
-- the hot path a call), which Inspect reads. The lock key itself stays what
-- any Redlock client writes.
--
-- KEYS: 1 lock, 2 waiters, 3 writers, 4 grant
-- ARGV: 1 owner, 2 TTL ms, 3 the record less the owner, "0 since-µs label",
--       4 the record's TTL ms, 5 inbox channel (absent: do not register),
--       6 registration lease ms
-- Returns 1: taken now
--         {2, pttl}: already held by owner (a retry after a lost reply)
--         {0, holder, pttl}: held by another owner
--         {-1}: the lock key holds a value that is not a string, not a lock
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('SET', KEYS[4], ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[4])
  return 1
end
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then return {-1} end
if holder == ARGV[1] then return {2, redis.call('PTTL', KEYS[1])} end
if ARGV[5] then
  local lease = tonumber(ARGV[6])
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if type(redis.pcall('HSET', KEYS[2], ARGV[5], string.format('%.0f', ms + lease))) == 'table' then
    return {-3}
  end
  if redis.call('PTTL', KEYS[2]) < 2 * lease then redis.call('PEXPIRE', KEYS[2], 2 * lease) end
  if type(redis.pcall('HSET', KEYS[3], ARGV[1], string.format('%.0f', ms + lease))) == 'table' then
    return {-3}
  end
  if redis.call('PTTL', KEYS[3]) < 2 * lease then redis.call('PEXPIRE', KEYS[3], 2 * lease) end
end
-- holder is false when the key vanished between SET and GET (impossible inside
-- a script) and a string otherwise.
return {0, holder or '', redis.call('PTTL', KEYS[1])}
