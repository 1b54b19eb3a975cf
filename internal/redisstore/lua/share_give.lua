-- share_give.lua: gives back one of a holder's share (store.Shares).
-- KEYS[1] shares HASH (see share_take.lua)
-- ARGV[1] holder
-- Returns {1} given, {0} the holder had no share (it lapsed and was dropped).
local me = ARGV[1]
local n = tonumber(redis.call('HGET', KEYS[1], me))
if not n then return {0} end
if n <= 1 then
  redis.call('HDEL', KEYS[1], me, 'x:' .. me)
else
  redis.call('HINCRBY', KEYS[1], me, -1)
end
return {1}
