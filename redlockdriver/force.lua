-- Frees the lock on this server whoever holds it (an operator's tool, see
-- ForceRelease): deletes the lock key, the holders set and the holders'
-- records, leaves a tombstone for each evicted owner in forced (which
-- refresh.lua reads to say "forced"; it lives at least three times what was
-- left of the lock's TTL, plus ARGV[1]), and tells every driver registered as
-- waiting, as a release does.
--
-- KEYS: 1 lock, 2 waiters, 3 holders, 4 grant, 5 labels, 6 forced
-- ARGV: 1 the least life of the tombstones (ms)
-- Returns {0}: the key was free here
--         {1, owner...}: the owners evicted here (none: a shared marker
--           whose holds had all expired)
--         {-1}: the lock key holds a value that is not a string
--         {-3}: the forced key holds data that is not a hash
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then return {-1} end
if not holder then return {0} end
local ft = redis.call('TYPE', KEYS[6])
if ft.ok ~= 'hash' and ft.ok ~= 'none' then return {-3} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pt = redis.call('PTTL', KEYS[1])
local out = {1}
if holder == '\0shared' then
  local live = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. string.format('%.0f', now), '+inf')
  if live.err == nil then
    for _, o in ipairs(live) do table.insert(out, o) end
  end
  redis.call('DEL', KEYS[1], KEYS[3], KEYS[5])
else
  table.insert(out, holder)
  redis.call('DEL', KEYS[1], KEYS[4])
end
if #out > 1 then
  for i = 2, #out do redis.call('HSET', KEYS[6], out[i], '1') end
  local life = 3 * math.max(pt, 0) + tonumber(ARGV[1])
  if redis.call('PTTL', KEYS[6]) < life then redis.call('PEXPIRE', KEYS[6], life) end
end
local w = redis.pcall('HGETALL', KEYS[2])
if type(w) == 'table' and not w.err then
  for i = 1, #w, 2 do
    if tonumber(w[i + 1]) <= now then
      redis.call('HDEL', KEYS[2], w[i])
    else
      redis.call('PUBLISH', w[i], KEYS[1])
    end
  end
end
return out
