-- Describes the lock on this server, changing nothing.
--
-- KEYS: 1 lock, 2 holders, 3 grant, 4 labels
-- Returns {0}: free here
--         {1, owner, pttl, record}: held exclusively by owner for pttl ms
--           more; record is the owner's grant record less the owner,
--           "0 since-µs label", or "" when the grant key is not owner's (a
--           lock taken by another Redlock client)
--         {2, then for each live shared hold: owner, ms left, record}: held
--           shared; record is the hold's entry in labels, or ""
--         {-1}: the lock key holds a value that is not a string
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then return {-1} end
if not holder then return {0} end
local function str(v)
  if type(v) == 'string' then return v end
  return ''
end
if holder ~= '\0shared' then
  local rec = str(redis.pcall('GET', KEYS[3]))
  if string.sub(rec, 1, #holder + 1) == holder .. ' ' then
    rec = string.sub(rec, #holder + 2)
  else
    rec = ''
  end
  return {1, holder, redis.call('PTTL', KEYS[1]), rec}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {2}
local m = redis.pcall('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%.0f', now), '+inf', 'WITHSCORES')
if m.err == nil then
  for i = 1, #m, 2 do
    table.insert(out, m[i])
    table.insert(out, tonumber(m[i + 1]) - now)
    table.insert(out, str(redis.pcall('HGET', KEYS[4], m[i])))
  end
end
return out
