-- coupon_raise.lua: lets the campaign hand out a block of numbers (lo, hi] reserved in the
-- database: right above the ceiling it extends it; further up the sequence moves to lo (the
-- numbers between are skipped, never handed out twice); at or below the ceiling, or reserved
-- for another incarnation (a copy of the campaign that was lost), it changes nothing.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2] incarnation, ARGV[3] lo, ARGV[4] hi
-- Returns {1} applied, {0} refused, or {CAMPAIGN_NOT_FOUND}.
local c = redis.call('HMGET', K_CAMP, 'seq', 'ceil', 'inc')
if not c[1] then return {CAMPAIGN_NOT_FOUND} end
local ceil, lo, hi = tonumber(c[2]) or 0, tonumber(ARGV[3]), tonumber(ARGV[4])
if c[3] ~= ARGV[2] or lo < ceil or hi <= lo then return {0} end
if lo > ceil then redis.call('HSET', K_CAMP, 'seq', lo) end
redis.call('HSET', K_CAMP, 'ceil', hi)
return {1}
