-- coupon_put.lua: creates or updates a campaign; its entries and counters are kept. A created
-- campaign hands out no number before a block is raised for its (new) incarnation
-- (coupon_raise.lua): a block reserved for a copy that was lost is refused. It records the
-- server it is on (rid: see coupon_check.lua).
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2] stock, ARGV[3] opens (ms, 0 = open), ARGV[4] incarnation (a new
-- random name, used if the campaign is created)
-- Returns {1} created or {0} updated.
local created = 0
if redis.call('HSETNX', K_CAMP, 'seq', 0) == 1 then
  created = 1
  redis.call('HSET', K_CAMP, 'ceil', 0, 'admitted', 0, 'inc', ARGV[4], 'rid', server_id())
else
  -- A campaign from before the ceiling: numbers up to seq handed out, admitted those not
  -- rejected (the old counters).
  if redis.call('HSETNX', K_CAMP, 'inc', ARGV[4]) == 1 then
    local o = redis.call('HMGET', K_CAMP, 'seq', 'rejected')
    redis.call('HSETNX', K_CAMP, 'admitted', math.max(0, tonumber(o[1]) - (tonumber(o[2]) or 0)))
    redis.call('HSETNX', K_CAMP, 'ceil', 0)
  end
end
redis.call('HSET', K_CAMP, 'stock', ARGV[2], 'opens', ARGV[3])
return {created}
