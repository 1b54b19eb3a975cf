-- set_control.lua: writes an event's controller state (package autoadmit) with a
-- compare-and-set on its seq, and in the same step the line's effective limits.
-- KEYS[1] the line's hash (prefix{event}; untouched when absent or not in mode auto: field
--   auto, put_event.lua), KEYS[2] the state
--   prefix{event}:ctl  HASH  seq, data (JSON)
-- ARGV[1] seq (written when the stored one is seq-1), ARGV[2] data, ARGV[3] max_active,
-- ARGV[4] admit_rate (/s), ARGV[5] ttl of the state (ms)
-- Returns {1} when written, {0} when the stored seq is not ARGV[1]-1.
local seq = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[2], 'seq')) or 0
if cur ~= seq - 1 then return {0} end
redis.call('HSET', KEYS[2], 'seq', seq, 'data', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
if redis.call('HGET', KEYS[1], 'auto') == '1' then
  -- max and rate are what the admission and join steps enforce; amax and arate say they are
  -- the controller's, so that a configuration in mode auto keeps them (put_event.lua).
  redis.call('HSET', KEYS[1], 'max', ARGV[3], 'rate', ARGV[4], 'amax', ARGV[3], 'arate', ARGV[4])
end
return {1}
