-- share_renew.lua: renews a holder's shares of several counts of one scope (store.Shares).
-- KEYS[i] shares HASH (see share_take.lua), all under one hash tag
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] holder, ARGV[3] ttl (ms), ARGV[3 + i] the holder's
-- count of KEYS[i]: a share that lapsed or is missing is set to it (the holder's own count is
-- the truth of its share; a live share keeps its value, which takes and gives in flight may
-- have moved); 0 drops the share
-- Returns {number of keys renewed}.
local now = now_ms(ARGV[1])
local me, ttl = ARGV[2], tonumber(ARGV[3])
for i, k in ipairs(KEYS) do
  local n = tonumber(ARGV[3 + i])
  if n <= 0 then
    redis.call('HDEL', k, me, 'x:' .. me)
  else
    local v = redis.call('HMGET', k, me, 'x:' .. me)
    if not v[1] or (tonumber(v[2]) or 0) <= now then
      redis.call('HSET', k, me, n)
    end
    redis.call('HSET', k, 'x:' .. me, now + ttl)
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
  end
end
return {#KEYS}
