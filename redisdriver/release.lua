-- Deletes the lock if owner holds it and hands it to the first live waiter; or,
-- for an owner that is waiting, gives up its place in the queue.
--
-- KEYS: 1 lock, 2 fence, 3 queue, 4 waiters, 5 holders
-- ARGV: 1 owner
-- Returns 1 if owner held the lock, 0 if not.

-- The uncontended path, inline: our lock, nobody waiting.
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[3]) == 0 then return 1 end
end

--@common

if holder == ARGV[1] then
  handoff()
  return 1
end
if redis.call('HDEL', waiters, ARGV[1]) == 1 then
  redis.call('LREM', queue, 1, ARGV[1])
  -- The free lock may have been kept for us, or we held back shared or
  -- permit waiters behind us.
  handoff()
end
return 0
