-- A fenced write (see fenced.go). KEYS[1]: the guarded key; KEYS[2]: its
-- token key, in the same slot. ARGV[1]: the writer's token, in decimal
-- without leading zeros; ARGV[2]: the write, "set", "hset" or "del"; the
-- rest: its arguments.
--
-- Returns {1} when the write was admitted and done, {0, held} when it was
-- refused because the token key holds the larger token held.
--
-- The tokens are compared as decimal strings (longer is larger, then byte
-- order), not as Lua numbers: those are doubles, exact only below 2^53, and
-- a token may be any uint64. The write comes before the token's SET: a write
-- that fails (a guarded key of the wrong type) raises before anything
-- changed, so a refused or failed call changes nothing.
local held = redis.call('GET', KEYS[2])
local tok = ARGV[1]
if held then
  if not string.find(held, '^[1-9]%d*$') then
    return redis.error_reply('ERR fenced write: the token key ' .. KEYS[2] .. ' holds no fencing token')
  end
  if #held > #tok or (#held == #tok and held > tok) then
    return {0, held}
  end
end
local op = ARGV[2]
if op == 'set' then
  if ARGV[4] == '0' then
    redis.call('SET', KEYS[1], ARGV[3])
  else
    redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  end
elseif op == 'hset' then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
elseif op == 'del' then
  redis.call('DEL', KEYS[1])
else
  return redis.error_reply('ERR fenced write: unknown write ' .. op)
end
if held ~= tok then
  redis.call('SET', KEYS[2], tok)
end
return {1}
