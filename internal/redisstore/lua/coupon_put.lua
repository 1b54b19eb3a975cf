-- coupon_put.lua: creates or updates a campaign; its entries and counters are kept.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2] stock, ARGV[3] opens (ms, 0 = open)
-- Returns {1} created or {0} updated.
local created = redis.call('HSETNX', K_CAMP, 'seq', 0)
if created == 1 then redis.call('HSET', K_CAMP, 'issued', 0, 'rejected', 0) end
redis.call('HSET', K_CAMP, 'stock', ARGV[2], 'opens', ARGV[3])
return {created}
