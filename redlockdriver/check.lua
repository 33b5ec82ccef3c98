-- Tells whether owner holds the lock on this server, changing nothing: the
-- key holds the owner, or (KEYS[3] given: a shared hold) the shared marker
-- with a live hold of owner in the holders set.
--
-- KEYS: 1 lock, 2 forced, 3 holders (shared holds only). ARGV: 1 owner
-- Returns 1 if owner holds the lock here; 0 if not (another owner, no key, or
-- a value that is not a string); 2 if not because an operator evicted the
-- owner here (ForceRelease left its tombstone in forced).
local function gone()
  if redis.pcall('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 2 end
  return 0
end
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then return 1 end
if not KEYS[3] or holder ~= '\0shared' then return gone() end
local sc = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
if type(sc) ~= 'string' then return gone() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(sc) > now then return 1 end
return gone()
