-- Tells whether owner holds the lock on this server, changing nothing.
--
-- KEYS: 1 lock. ARGV: 1 owner
-- Returns 1 if owner holds the lock here, 0 if not (another owner, no key, or a
-- value that is not a string).
if redis.pcall('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
