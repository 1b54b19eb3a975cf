-- coupon_recover.lua: puts a campaign whose store lost data back in order (the database's
-- figures): the sequence moves to at least the floor (every number ever handed out, read after
-- the loss) and the ceiling to at least the sequence: numbers at or below the floor that the
-- lost copy may have handed out are never handed out again, and a block above the floor
-- (raised since) is kept. Admitted becomes the database's count. The campaign records the
-- server it is recovered on (rid: see coupon_check.lua). Entries are restored by
-- coupon_restore.lua.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2] floor, ARGV[3] admitted
-- Returns {seq} or {CAMPAIGN_NOT_FOUND}.
local c = redis.call('HMGET', K_CAMP, 'seq', 'ceil')
if not c[1] then return {CAMPAIGN_NOT_FOUND} end
local seq = math.max(tonumber(c[1]), tonumber(ARGV[2]))
redis.call('HSET', K_CAMP, 'seq', seq, 'ceil', math.max(seq, tonumber(c[2]) or 0), 'admitted', ARGV[3], 'rid', server_id())
return {seq}
