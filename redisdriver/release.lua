-- Deletes the lock if owner holds it and hands it to the first live waiter; or,
-- for an owner that is waiting, gives up its place in the queue.
--
-- KEYS: as in common.lua (1 lock, 3 queue, 6 labels inline)
-- ARGV: 1 owner
-- Returns 1 if owner held the lock, 0 if not.

-- The uncontended path, inline: our lock (the owner alone, or without
-- fencing the owner, a NUL and the label: see holds in common.lua), nobody
-- waiting, no watcher (and no shaped holder's record or waiter's label) in
-- labels. The fence record keeps the holder's record, which Inspect ignores
-- once the lock is gone.
local holder = redis.pcall('GET', KEYS[1])
-- A value of another type is not ours; any other error (GET refused, as by
-- an ACL without it) says nothing about the lock: it is the call's.
if type(holder) == 'table' and holder.err and string.sub(holder.err, 1, 9) ~= 'WRONGTYPE' then
  return holder
end
local mine = holder == ARGV[1] or (type(holder) == 'string' and string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. '\0')
if mine then
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[3], KEYS[6]) == 0 then return 1 end
end

--@common

if mine then
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
