-- Takes the lock without minting a fencing token: acquire.lua for a driver
-- without fencing (WithFencing(false)). Only the uncontended path differs;
-- the rest (the queue, a lock already ours, errors) is acquire.lua's after
-- its fast path, which mints as usual (the driver reports no token).
--
-- TryAcquire runs this script only when its plain SET NX PX found the key
-- taken (see plainTry in acquire.go); Acquire runs it first, for the queue
-- check.
--
-- KEYS, ARGV and replies: as in acquire.lua; the token is 0 on this path.
-- The driver sends here only owners that are not empty and hold no NUL.

-- The uncontended path, inline: the key is free and (for a waiter) nobody
-- queues. The lock's value carries the holder's label after its owner and a
-- NUL byte, so Inspect needs no record beside it; the fence record is left
-- as it is. Watchers, if any (their deadline in labels), are told. As in
-- acquire.lua, a waiter's one EXISTS asks at once whether anyone queues or
-- watches, so the usual case calls two commands, not three.
local quiet = ARGV[4] and redis.call('EXISTS', KEYS[3], KEYS[6]) == 0
if (not ARGV[4] or quiet or redis.call('EXISTS', KEYS[3]) == 0) and redis.call('SET', KEYS[1], ARGV[1] .. '\0' .. ARGV[3], 'NX', 'PX', ARGV[2]) then
  if not quiet then
    local w = redis.pcall('HGET', KEYS[6], '\0watch')
    if type(w) == 'string' then
      local t = redis.call('TIME')
      if tonumber(w) * 1000 > t[1] * 1000000 + t[2] then redis.call('PUBLISH', KEYS[1] .. ':watch', '') end
    end
  end
  return 0
end
