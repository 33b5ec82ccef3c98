-- Describes the key's holders, changing nothing.
--
-- KEYS: as in common.lua
-- Returns {-1}: the lock key holds a value that is not a string
--         {1, now ms, fence, live waiters, n, then for each live holder: owner,
--          expiry ms (-1: none), record}; n is -2 when the key is free, -1
--          for an exclusive holder, 0 for shared holders, N for permits of
--          N. The record of an exclusive holder is "token since-µs label"
--          from the fence record when it is that holder's, "0 0 label" when
--          the lock's value carries the label (without fencing), of a shaped holder
--          its entry in labels; "" when there is none (a standard SET NX
--          client's lock, data deleted by hand).

--@common

local holder = redis.pcall('GET', lock)
if type(holder) == 'table' then return {-1} end
local last = redis.pcall('GET', fence)
if type(last) ~= 'string' then last = '' end
local live = 0
local q = redis.pcall('LRANGE', queue, 0, -1)
if q.err == nil then
  for _, w in ipairs(q) do
    local e = redis.pcall('HGET', waiters, w)
    if type(e) == 'string' then
      local d = parse(e)
      if d and d > clock().ms then live = live + 1 end
    end
  end
end
local out = {1, clock().ms, string.format('%.0f', tokenOf(last)), live, -2}
if not holder then return out end

local function str(v)
  if type(v) == 'string' then return v end
  return ''
end
if string.byte(holder, 1) == 0 then
  out[5] = tonumber(string.match(holder, '^%z?permits (%d+)$')) or 0
  local m = redis.pcall('ZRANGEBYSCORE', holders, '(' .. clock().ms, '+inf', 'WITHSCORES')
  if m.err == nil then
    for i = 1, #m, 2 do
      table.insert(out, m[i])
      table.insert(out, tonumber(m[i + 1]))
      table.insert(out, str(redis.pcall('HGET', labels, m[i])))
    end
  end
else
  out[5] = -1
  local rec = ''
  local label
  holder, label = split(holder)
  if label then
    -- Taken without fencing: the label is in the lock's value; no token, no
    -- grant time.
    rec = '0 0 ' .. label
  else
    local tok, us, rest = string.match(last, '^(%d+) (%d+) (.*)$')
    if tok and string.sub(rest, 1, #holder + 1) == holder .. ' ' then
      rec = tok .. ' ' .. us .. ' ' .. string.sub(rest, #holder + 2)
    end
  end
  local pt = redis.call('PTTL', lock)
  local exp = -1
  if pt >= 0 then exp = clock().ms + pt end
  table.insert(out, holder)
  table.insert(out, exp)
  table.insert(out, rec)
end
return out
