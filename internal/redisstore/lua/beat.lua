-- beat.lua: an instance's heartbeat; forgets the instances whose time ran out and lists those
-- alive (package history).
-- KEYS[1] fleet  ZSET   instance id, scored by the time it counts as alive until (ms)
-- KEYS[2] info   HASH   instance id -> its info
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] id, ARGV[3] info, ARGV[4] ttl (ms)
-- Returns {id, until ms, info, id, until ms, info, ...} of the instances alive, by id.
local now = now_ms(ARGV[1])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
end
local alive = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {}
for i = 1, #alive, 2 do
  out[#out + 1] = alive[i]
  out[#out + 1] = tonumber(alive[i + 1])
  out[#out + 1] = redis.call('HGET', KEYS[2], alive[i]) or ''
end
return out
