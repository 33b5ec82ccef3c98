-- Extends the lock to a new TTL if owner holds it on this server: the key
-- holds the owner (its grant record is extended with it if it would end sooner), or (KEYS[4] given:
-- a shared hold) the key holds the shared marker and the holders set a live
-- hold of owner, which is extended, and the marker, holders set and labels
-- with it when they would end sooner.
--
-- KEYS: 1 lock, 2 grant, 3 forced, 4 holders, 5 labels (4 and 5: shared
--       holds only)
-- ARGV: 1 owner, 2 TTL ms
-- Returns 1 if owner holds the lock here; 0 if not (another owner, no key, or
-- a value that is not a string); 2 if not because an operator evicted the
-- owner here (ForceRelease left its tombstone in forced). A missing key is
-- never re-created: whether the lock is still held is decided by the
-- majority, not by one server.
local function gone()
  if redis.pcall('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 2 end
  return 0
end
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  -- The grant record outlives the lock (see acquire.lua): never shorten it.
  local rt = redis.call('PTTL', KEYS[2])
  if rt >= 0 and rt < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  return 1
end
if not KEYS[4] or holder ~= '\0shared' then return gone() end
local sc = redis.pcall('ZSCORE', KEYS[4], ARGV[1])
if type(sc) ~= 'string' then return gone() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(sc) <= now then return gone() end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
  redis.call('PEXPIRE', KEYS[5], ttl)
end
return 1
