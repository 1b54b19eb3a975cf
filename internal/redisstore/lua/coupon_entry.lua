-- coupon_entry.lua: reads a user's entry.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2] user key
-- Returns {number, outcome ('' pending, 'R', 'I<code>'), user id}, or {CAMPAIGN_NOT_FOUND} no such campaign,
-- {ENTRY_NOT_FOUND} no entry.
if redis.call('EXISTS', K_CAMP) == 0 then return {CAMPAIGN_NOT_FOUND} end
local n = redis.call('HGET', K_CUSERS, ARGV[2])
if not n then return {ENTRY_NOT_FOUND} end
return {tonumber(n), redis.call('HGET', K_RES, n) or '', redis.call('HGET', K_ENT, n) or ''}
