-- hist_add.lua: adds deltas to a history series' counters (package history).
-- KEYS[1] counters  HASH   counter name -> running total
-- ARGV[1] ttl (ms: the counters expire this long after the last add), ARGV[2..] pairs: name, delta
-- Returns {1}.
for i = 2, #ARGV - 1, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {1}
