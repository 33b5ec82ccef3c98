-- Frees the key of all its holders, whoever they are (an operator's tool, see
-- ForceRelease): deletes the lock key and the holders' records, raises the
-- fence record to the largest evicted token (so the next token exceeds them
-- all, whatever the clock), leaves a tombstone for each evicted owner in
-- forced (which the refresh scripts read to say "forced", and which lives a
-- few of the holds' TTLs), hands the key to the waiters as a release does and
-- tells the watchers.
--
-- KEYS: as in common.lua
-- ARGV: 1 the least life of the tombstones (ms)
-- Returns {n}: n holders evicted (0: the key was free)
--         {-1}: the lock key holds a value that is not a string
--         {-3, n}: KEYS[n] holds data of the wrong type

--@common

local holder = redis.pcall('GET', lock)
if type(holder) == 'table' then return {-1} end
if not holder then return {0} end
local ft = redis.call('TYPE', forced)
if ft.ok ~= 'hash' and ft.ok ~= 'none' then return {-3, 9} end
local last = redis.pcall('GET', fence)
if type(last) == 'table' then return {-3, 2} end
local top = tonumber(last) or 0
local pt = redis.call('PTTL', lock)
local evicted = {}
if string.byte(holder, 1) == 0 then
  -- A marker: the live members of holders are the holders.
  local live = redis.call('ZRANGEBYSCORE', holders, '(' .. clock().ms, '+inf')
  for _, m in ipairs(live) do
    table.insert(evicted, m)
    local rec = redis.pcall('HGET', labels, m)
    if type(rec) == 'string' then top = math.max(top, tonumber(string.match(rec, '^(%d+) ')) or 0) end
  end
  dropRecords(redis.call('ZRANGE', holders, 0, -1))
  redis.call('DEL', lock, holders)
else
  table.insert(evicted, holder)
  local rec = redis.pcall('GET', grant)
  if type(rec) == 'string' and string.sub(rec, 1, #holder + 1) == holder .. ' ' then
    top = math.max(top, tonumber(string.match(string.sub(rec, #holder + 2), '^(%d+) ')) or 0)
  end
  redis.call('DEL', lock, grant)
end

if top > (tonumber(last) or 0) then
  redis.call('SET', fence, string.format('%.0f', top), 'KEEPTTL')
end
if redis.call('PTTL', fence) < 0 then redis.call('PEXPIRE', fence, FENCE_KEEP) end
for _, o in ipairs(evicted) do redis.call('HSET', forced, o, '1') end
if #evicted > 0 then atLeast(forced, 3 * math.max(pt, 0) + tonumber(ARGV[1])) end
handoff()
changed()
return {#evicted}
