-- hist_append.lua: adds a sample to a history series and drops the samples older than the
-- series keeps (package history).
-- KEYS[1] series  ZSET   member "<at ms>|<data>", score at (ms)
-- ARGV[1] at (ms), ARGV[2] data, ARGV[3] keep (ms)
-- Returns {1}.
local at, keep = tonumber(ARGV[1]), tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], at, ARGV[1] .. '|' .. ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (at - keep))
redis.call('PEXPIRE', KEYS[1], keep)
return {1}
