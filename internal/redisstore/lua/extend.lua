-- extend.lua: gives every admitted session of the event ARGV[2] ms more: the expiry of each
-- live claimed session and the claim deadline of each claimable batch (an operator's action,
-- e.g. after an outage of the shop). O(admitted sessions): at most max_active.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] extension (ms, > 0)
-- Returns {sessions extended (claimed and claimable)}, or {EVENT_NOT_FOUND}.
local now = now_ms(ARGV[1])
local e = load_event()
if not e then return {EVENT_NOT_FOUND} end
local d = tonumber(ARGV[2])
local live = redis.call('ZRANGEBYSCORE', K_ACT, '(' .. now, '+inf', 'WITHSCORES')
local n = 0
for i = 1, #live, 2000 do
  local args = {}
  for j = i, math.min(i + 1999, #live), 2 do
    args[#args + 1] = tonumber(live[j + 1]) + d
    args[#args + 1] = live[j]
    n = n + 1
    -- session_max moves with it (the session's absolute end, when it has one)
    local fin = redis.call('HGET', K_BATX, 'm' .. live[j])
    if fin then redis.call('HSET', K_BATX, 'm' .. live[j], tonumber(fin) + d) end
  end
  redis.call('ZADD', K_ACT, 'XX', unpack(args))
end
local claimable = 0
for _, lo in ipairs(redis.call('ZRANGE', K_BAT, 0, -1)) do
  local v = redis.call('HMGET', K_BATX, 'u' .. lo, 'd' .. lo)
  local deadline = tonumber(v[2]) or 0
  if deadline > now then
    redis.call('HSET', K_BATX, 'd' .. lo, deadline + d)
    claimable = claimable + (tonumber(v[1]) or 0)
  end
end
return {n + claimable}
