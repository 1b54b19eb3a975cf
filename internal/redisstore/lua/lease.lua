-- lease.lua: takes or renews a named lease shared by the instances.
-- KEYS[1] lease  STRING "<until ms>|<holder>", also expiring on its own after the ttl
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] holder, ARGV[3] ttl (ms)
-- Returns {1} when ARGV[2] holds the lease now, {0} when another holder does.
local now = now_ms(ARGV[1])
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, '|', 1, true)
  local untl, holder = tonumber(string.sub(cur, 1, sep - 1)), string.sub(cur, sep + 1)
  if holder ~= ARGV[2] and untl > now then return {0} end
end
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[1], (now + ttl) .. '|' .. ARGV[2], 'PX', ttl)
return {1}
