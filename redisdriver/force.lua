-- Frees the key of all its holders, whoever they are (an operator's tool, see
-- ForceRelease): deletes the lock key and the holders' records, sets the
-- fence record to the largest evicted token (so the next token exceeds them
-- all, whatever the clock), leaves a tombstone for each evicted owner in
-- forced (which the refresh scripts read to say "forced", and which lives a
-- few of the holds' TTLs), hands the key to the waiters as a release does and
-- tells the watchers.
--
-- KEYS: as in common.lua, with 7 forced
-- ARGV: 1 the least life of the tombstones (ms)
-- Returns {n}: n holders evicted (0: the key was free)
--         {-1}: the lock key holds a value that is not a string
--         {-3, n}: KEYS[n] holds data of the wrong type

--@common

local holder = redis.pcall('GET', lock)
if type(holder) == 'table' then return {-1} end
if not holder then return {0} end
local ft = redis.call('TYPE', forced)
if ft.ok ~= 'hash' and ft.ok ~= 'none' then return {-3, 7} end
local last = redis.pcall('GET', fence)
if type(last) == 'table' then return {-3, 2} end
-- The fence record holds the exclusive holder's token (or a later one); a
-- shaped holder's is in its own record.
local top = tokenOf(last)
local pt = redis.call('PTTL', lock)
local evicted = {}
if string.byte(holder, 1) == 0 then
  -- A marker: the live members of holders are the holders.
  local live = redis.call('ZRANGEBYSCORE', holders, '(' .. clock().ms, '+inf')
  for _, m in ipairs(live) do
    table.insert(evicted, m)
    top = math.max(top, tokenOf(redis.pcall('HGET', labels, m)))
  end
  dropRecords(redis.call('ZRANGE', holders, 0, -1))
  redis.call('DEL', lock, holders)
else
  table.insert(evicted, (split(holder)))
  redis.call('DEL', lock)
end

-- The token alone: the evicted holder's record goes.
if last then
  redis.call('SET', fence, string.format('%.0f', top), 'KEEPTTL')
else
  redis.call('SET', fence, string.format('%.0f', top), 'PX', math.max(pt, 0) + FENCE_KEEP)
end
for _, o in ipairs(evicted) do redis.call('HSET', forced, o, '1') end
if #evicted > 0 then atLeast(forced, 3 * math.max(pt, 0) + tonumber(ARGV[1])) end
handoff()
changed()
return {#evicted}
