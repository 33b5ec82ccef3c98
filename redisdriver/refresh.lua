-- Extends the lock to a new TTL if owner holds it, or only checks that it
-- does. The fence record, which holds the holder's record, is made to live
-- FENCE_KEEP beyond the new TTL, so a lock held longer keeps its record.
--
-- KEYS: 1 lock, 2 fence, 3 forced. ARGV: 1 owner, 2 TTL ms (0: check only)
-- Returns 1 if owner holds the lock, 0 if not because the key is gone, 3 if
-- not because it holds another owner (or a value that is not a string), 2 if
-- not because ForceRelease evicted owner.
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then
  if redis.pcall('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 2 end
  if v == false then return 0 end
  return 3
end
if ARGV[2] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2] + FENCE_KEEP)
end
return 1
