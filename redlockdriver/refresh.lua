-- Extends the lock to a new TTL if owner holds it on this server: the key
-- holds the owner, or (KEYS[2] given: a shared hold) the key holds the shared
-- marker and the holders set a live hold of owner, which is extended, and
-- the marker with it when it would end sooner.
--
-- KEYS: 1 lock, 2 holders (shared holds only). ARGV: 1 owner, 2 TTL ms
-- Returns 1 if owner holds the lock here, 0 if not (another owner, no key, or a
-- value that is not a string). A missing key is never re-created: whether the
-- lock is still held is decided by the majority, not by one server.
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not KEYS[2] or holder ~= '\0shared' then return 0 end
local sc = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
if type(sc) ~= 'string' then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(sc) <= now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
