-- Takes the lock with SET NX PX without minting a fencing token: acquire.lua
-- for a driver without fencing (WithFencing(false)). Only the uncontended
-- path differs; the rest (the queue, a lock already ours, errors) is
-- acquire.lua's after its fast path, which mints as usual (the driver
-- reports no token).
--
-- KEYS, ARGV and replies: as in acquire.lua; the token is 0 on this path.

-- The uncontended path, inline: the key is free and (for a waiter) nobody
-- queues. Beside the lock, the holder's record for Inspect ("0 0 owner
-- label": no token, no grant time, which package lock reads from the label)
-- in the fence record's key, made anew with the record's full life, without
-- reading the server clock or the last token. SET ... GET refuses a key of
-- another type, which stays untouched. Watchers, if any (their deadline in
-- labels), are told.
if (not ARGV[4] or redis.call('EXISTS', KEYS[3]) == 0) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local last = redis.pcall('SET', KEYS[2], '0 0 ' .. ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[2] + FENCE_KEEP, 'GET')
  if type(last) == 'table' and last.err then
    redis.call('DEL', KEYS[1])
    return {-3, 2}
  end
  local w = redis.pcall('HGET', KEYS[6], '\0watch')
  if type(w) == 'string' then
    local t = redis.call('TIME')
    if tonumber(w) * 1000 > t[1] * 1000000 + t[2] then redis.call('PUBLISH', KEYS[1] .. ':watch', '') end
  end
  return 0
end
