-- Deletes the lock if owner holds it and hands it to the first live waiter; or,
-- for an owner that is waiting, gives up its place in the queue.
--
-- KEYS: as in common.lua (1 lock, 3 queue, 6 grant, 8 watch inline)
-- ARGV: 1 owner
-- Returns 1 if owner held the lock, 0 if not.

-- The uncontended path, inline: our lock (and its grant record), nobody
-- waiting; watchers, if any, are told.
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[6])
  if redis.call('EXISTS', KEYS[3]) == 0 then
    if redis.call('EXISTS', KEYS[8]) == 1 then redis.call('PUBLISH', KEYS[8], '') end
    return 1
  end
end

--@common

if holder == ARGV[1] then
  handoff()
  changed()
  return 1
end
if redis.call('HDEL', waiters, ARGV[1]) == 1 then
  redis.call('LREM', queue, 1, ARGV[1])
  redis.call('HDEL', labels, ARGV[1])
  -- The free lock may have been kept for us, or we held back shared or
  -- permit waiters behind us.
  if handoff() then changed() end
end
return 0
