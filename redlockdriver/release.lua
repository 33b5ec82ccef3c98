-- Deletes the lock if owner holds it on this server and, when asked to, tells
-- the drivers registered as waiting for it (PUBLISH on each live inbox; dead
-- registrations are dropped). The releasing driver's own inbox is told only
-- when no other driver waits: the lock passes to another driver rather than
-- back to the one that let it go, so one driver contends for it, not two.
-- Optionally removes one inbox's registration.
--
-- KEYS: 1 lock, 2 waiters
-- ARGV: 1 owner, 2 "1" to notify waiters, "0" not to (a partial grant given
--       back after a lost vote: the lock is not free), 3 inbox to unregister
--       ("" for none), 4 the releasing driver's own inbox ("" for none)
-- Returns 1 if owner held the lock here, 0 if not.
local r = 0
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  r = 1
end
if ARGV[3] ~= '' then redis.pcall('HDEL', KEYS[2], ARGV[3]) end
if r == 1 and ARGV[2] == '1' then
  local w = redis.pcall('HGETALL', KEYS[2])
  if type(w) == 'table' and #w > 0 and not w.err then
    local t = redis.call('TIME')
    local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local own = false
    local told = 0
    for i = 1, #w, 2 do
      if tonumber(w[i + 1]) <= ms then
        redis.call('HDEL', KEYS[2], w[i])
      elseif w[i] == ARGV[4] then
        own = true
      else
        redis.call('PUBLISH', w[i], KEYS[1])
        told = told + 1
      end
    end
    if own and told == 0 then redis.call('PUBLISH', ARGV[4], KEYS[1]) end
  end
end
return r
