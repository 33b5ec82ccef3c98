-- Extends the lock to a new TTL if owner holds it on this server.
--
-- KEYS: 1 lock. ARGV: 1 owner, 2 TTL ms
-- Returns 1 if owner holds the lock here, 0 if not (another owner, no key, or a
-- value that is not a string). A missing key is never re-created: whether the
-- lock is still held is decided by the majority, not by one server.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
