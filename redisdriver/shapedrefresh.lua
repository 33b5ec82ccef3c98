-- Extends a shared hold or a permit to a new TTL if owner holds it, or only
-- checks that it does. The lock key (the marker) keeps the latest expiry of
-- all holds, and the holders' records live at least as long.
--
-- KEYS: 1 lock, 2 holders, 3 labels, 4 forced.
-- ARGV: 1 owner, 2 TTL ms (0: check only), 3 n (0: shared)
-- Returns 1 if owner holds it, 0 if not, 2 if not because ForceRelease
-- evicted owner.
local function gone()
  if redis.pcall('HEXISTS', KEYS[4], ARGV[1]) == 1 then return 2 end
  return 0
end
local marker = '\0shared'
if ARGV[3] ~= '0' then marker = '\0permits ' .. ARGV[3] end
if redis.pcall('GET', KEYS[1]) ~= marker then return gone() end
local sc = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
if type(sc) ~= 'string' then return gone() end
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
if tonumber(sc) <= now then return 0 end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
    if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
  end
end
return 1
