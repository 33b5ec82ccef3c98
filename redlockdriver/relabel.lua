-- Replaces owner's label in its record if owner holds the lock on this
-- server, keeping the record's since (or starting it now, by the server's
-- clock, when the record is missing).
--
-- The grant record keeps its TTL when it is the owner's (it outlives the
-- lock: see acquire.lua); a missing one is written to live the lock's time
-- left plus ARGV[3].
--
-- KEYS: 1 lock, 2 grant, 3 holders, 4 labels
-- ARGV: 1 owner, 2 label, 3 how much longer than the lock a new grant record
--       lives, ms
-- Returns 1 if owner holds the lock here (the label is replaced), 0 if not.
local holder = redis.pcall('GET', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowus = t[1] .. string.format('%06d', tonumber(t[2]))
local function since(rec)
  if type(rec) ~= 'string' then return nowus end
  return string.match(rec, '^%d+ (%d+) ') or nowus
end
if holder == ARGV[1] then
  local rec = redis.pcall('GET', KEYS[2])
  if type(rec) == 'string' and string.sub(rec, 1, #holder + 1) == holder .. ' ' then
    rec = string.sub(rec, #holder + 2)
  else
    rec = nil
  end
  local pt = redis.call('PTTL', KEYS[1])
  if rec then
    local rt = redis.call('PTTL', KEYS[2])
    if rt < 0 or pt < 0 then pt = -1 elseif rt > pt then pt = rt end
  elseif pt > 0 then
    pt = pt + tonumber(ARGV[3])
  end
  local v = holder .. ' 0 ' .. since(rec) .. ' ' .. ARGV[2]
  if pt > 0 then redis.call('SET', KEYS[2], v, 'PX', pt) else redis.call('SET', KEYS[2], v) end
  return 1
end
if holder ~= '\0shared' then return 0 end
local sc = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
if type(sc) ~= 'string' or tonumber(sc) <= now then return 0 end
local rec = redis.pcall('HGET', KEYS[4], ARGV[1])
if type(redis.pcall('HSET', KEYS[4], ARGV[1], '0 ' .. since(rec) .. ' ' .. ARGV[2])) == 'table' then return 0 end
local pt = redis.call('PTTL', KEYS[1])
if redis.call('PTTL', KEYS[4]) < pt then redis.call('PEXPIRE', KEYS[4], pt) end
return 1
