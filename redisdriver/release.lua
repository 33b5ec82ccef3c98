-- Deletes the lock if owner holds it and hands it to the first live waiter; or,
-- for an owner that is waiting, gives up its place in the queue.
--
-- ARGV: 2 owner
-- Returns 1 if owner held the lock, 0 if not.
local owner = ARGV[2]

local holder = redis.pcall('GET', lock)
if holder == owner then
  redis.call('DEL', lock)
  handoff()
  return 1
end
if redis.call('HDEL', waiters, owner) == 1 then
  redis.call('LREM', queue, 1, owner)
  -- The free lock may have been kept for us.
  if not holder then handoff() end
end
return 0
