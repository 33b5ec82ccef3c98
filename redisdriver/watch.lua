-- Marks the key watched for ARGV[1] ms from now (by the server's clock): the
-- scripts that change the key's holders publish while the deadline in labels
-- has not passed. labels lives at least that long (it never shortens).
--
-- KEYS: 1 labels. ARGV: 1 ms
local t = redis.call('TIME')
local ms = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
redis.call('HSET', KEYS[1], '\0watch', string.format('%.0f', ms + tonumber(ARGV[1])))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
