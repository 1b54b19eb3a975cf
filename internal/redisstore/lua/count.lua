-- count.lua: adds to a count per key in fixed windows aligned on the Unix epoch, shared by the
-- instances (store.Counters).
-- KEYS[1] counter HASH: w = the start of its window (ms), n = the count in it; it expires at
-- the end of its window
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] what to add (>= 0; 0 only reads), ARGV[3] window (ms)
-- Returns {the count after the addition, ms until the window ends}.
local now = now_ms(ARGV[1])
local win = tonumber(ARGV[3])
local ws = now - now % win
local v = redis.call('HMGET', KEYS[1], 'w', 'n')
local n = 0
if tonumber(v[1]) == ws then n = tonumber(v[2]) or 0 end
local add = tonumber(ARGV[2])
if add > 0 then
  n = n + add
  redis.call('HSET', KEYS[1], 'w', ws, 'n', n)
  redis.call('PEXPIRE', KEYS[1], ws + win - now)
end
return {n, ws + win - now}
