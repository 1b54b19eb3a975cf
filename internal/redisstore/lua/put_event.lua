-- put_event.lua: creates an event's line, or updates the configuration of an existing one
-- (its counters and generation are kept).
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] generation for a new line, ARGV[3] max_active,
-- ARGV[4] admit_rate (/s), ARGV[5] session TTL (ms), ARGV[6] claim TTL (ms),
-- ARGV[7] opens_at (ms, 0 = unset), ARGV[8] closes_at (ms, 0 = unset)
-- Returns the line's generation.
local now = now_ms(ARGV[1])
redis.call('HSET', K_EV, 'max', ARGV[3], 'rate', ARGV[4], 'sttl', ARGV[5], 'cttl', ARGV[6],
  'open', ARGV[7], 'close', ARGV[8])
if redis.call('HSETNX', K_EV, 'gen', ARGV[2]) == 1 then
  local size = math.max(1, math.floor(tonumber(ARGV[4]) / 10))
  redis.call('HSET', K_EV, 'seq', 0, 'srv', 0, 'tot', 0, 'unc', 0, 'tok', size, 'tokms', now,
    'rt', 0, 'wst', now, 'wcnt', 0)
end
return tonumber(redis.call('HGET', K_EV, 'gen'))
