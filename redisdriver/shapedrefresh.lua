-- Extends a shared hold or a permit to a new TTL if owner holds it, or only
-- checks that it does. The lock key (the marker) keeps the latest expiry of
-- all holds.
--
-- KEYS: 1 lock, 2 holders. ARGV: 1 owner, 2 TTL ms (0: check only), 3 n (0: shared)
-- Returns 1 if owner holds it, 0 if not.
local marker = '\0shared'
if ARGV[3] ~= '0' then marker = '\0permits ' .. ARGV[3] end
if redis.pcall('GET', KEYS[1]) ~= marker then return 0 end
local sc = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
if type(sc) ~= 'string' then return 0 end
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
if tonumber(sc) <= now then return 0 end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
return 1
