-- Tells whether owner holds the lock on this server, changing nothing: the
-- key holds the owner, or (KEYS[2] given: a shared hold) the shared marker
-- with a live hold of owner in the holders set.
--
-- KEYS: 1 lock, 2 holders (shared holds only). ARGV: 1 owner
-- Returns 1 if owner holds the lock here, 0 if not (another owner, no key, or a
-- value that is not a string).
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then return 1 end
if not KEYS[2] or holder ~= '\0shared' then return 0 end
local sc = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
if type(sc) ~= 'string' then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(sc) > now then return 1 end
return 0
