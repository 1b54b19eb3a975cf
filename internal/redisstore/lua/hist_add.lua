-- hist_add.lua: adds deltas to a history series' counters (package history).
-- KEYS[1] counters  HASH   counter name -> running total
-- ARGV[1] ttl (ms: the counters expire this long after the last add), ARGV[2..] pairs: name, delta
-- Returns {1}. A total that an add would take past int64 starts again from that add (a reset,
-- which readers of the series take as a count gone down), so that the add is never made in
-- part: HINCRBY's overflow error would leave the adds before it made and the caller, told it
-- failed, would add them all again.
for i = 2, #ARGV - 1, 2 do
  local r = redis.pcall('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  if type(r) == 'table' and r.err then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {1}
