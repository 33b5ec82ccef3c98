-- Takes the exclusive locks of a set (TryAcquireSet) on this server at once:
-- every one, or none. Each is checked first: its key must be free (as
-- acquire.lua's SET NX finds it) and no live writer may wait for it here (a
-- waiting exclusive request, registered by acquire.lua: the set does not
-- pass it). Only then is every lock taken as acquire.lua takes one, with its
-- record in the grant key, so a refused set writes nothing.
--
-- KEYS: per lock 3: lock, writers, grant
-- ARGV: per lock 4: owner, TTL ms, the record less the owner, "0 since-µs
--       label", the record's TTL ms
-- Returns 1: every lock taken
--         {0, holder, pttl}: nothing taken: a lock is held by holder, or a
--                            writer waits for it ("\0writer", pttl: until
--                            its registration ends)
--         {-1}: a lock key holds a value that is not a string, not a lock
--         {-3}: a writers key holds data of the wrong type
local now
for i = 1, #KEYS, 3 do
  local holder = redis.pcall('GET', KEYS[i])
  if type(holder) == 'table' then return {-1} end
  if holder then return {0, holder, redis.call('PTTL', KEYS[i])} end
  local w = redis.pcall('HVALS', KEYS[i + 1])
  if w.err then return {-3} end
  for _, dl in ipairs(w) do
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    if (tonumber(dl) or 0) > now then return {0, '\0writer', tonumber(dl) - now} end
  end
end
for i = 1, #KEYS, 3 do
  local a = (i - 1) / 3 * 4
  redis.call('SET', KEYS[i], ARGV[a + 1], 'PX', ARGV[a + 2])
  redis.call('SET', KEYS[i + 2], ARGV[a + 1] .. ' ' .. ARGV[a + 3], 'PX', ARGV[a + 4])
end
return 1
