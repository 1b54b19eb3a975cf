-- coupon_stats.lua: a campaign's counters in the store.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME)
-- Returns {stock, seq, ceil, admitted, queued, taken, incarnation, now}, or {CAMPAIGN_NOT_FOUND} no
-- such campaign.
local now = now_ms(ARGV[1])
local c = redis.call('HMGET', K_CAMP, 'stock', 'seq', 'ceil', 'admitted', 'inc')
if not c[2] then return {CAMPAIGN_NOT_FOUND} end
return {tonumber(c[1]), tonumber(c[2]), tonumber(c[3]) or 0, tonumber(c[4]) or 0, redis.call('ZCARD', K_Q),
  redis.call('ZCARD', K_PROC), c[5] or '', now}
