-- coupon_entry.lua: reads a user's entry. A number restored to another user (coupon_restore.lua)
-- is not the user's.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2] user key, ARGV[3] user id
-- Returns {number, outcome ('' pending, 'R', 'I<code>'), unconfirmed (0/1)}, or
-- {CAMPAIGN_NOT_FOUND} no such campaign, {ENTRY_NOT_FOUND} no entry.
if redis.call('EXISTS', K_CAMP) == 0 then return {CAMPAIGN_NOT_FOUND} end
local v = redis.call('HGET', K_CUSERS, ARGV[2])
if not v then return {ENTRY_NOT_FOUND} end
local n = tonumber(v)
local unconfirmed = 0
if n < 0 then n, unconfirmed = -n, 1 end
if redis.call('HGET', K_ENT, n) ~= ARGV[3] then return {ENTRY_NOT_FOUND} end
return {n, redis.call('HGET', K_RES, n) or '', unconfirmed}
