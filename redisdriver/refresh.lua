-- Extends the lock to a new TTL if owner holds it, or only checks that it does.
--
-- KEYS: 1 lock. ARGV: 1 owner, 2 TTL ms (0: check only)
-- Returns 1 if owner holds the lock, 0 if not (another owner, no key, or a value
-- that is not a string).
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
