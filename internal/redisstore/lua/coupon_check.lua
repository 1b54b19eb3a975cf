-- coupon_check.lua: is the campaign on the Redis server it was created or last recovered on
-- (field rid)? A restart from an older snapshot, or a failover to a replica that missed the
-- last writes, runs it on another: it must be recovered from the database before its numbers
-- are used (coupon_recover.lua). Run once per campaign after each new connection (see
-- couponGuard), never on the hot path (server_id costs an INFO call).
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused)
-- Returns {0} the same server, {1} another (or a campaign from before rid), or
-- {CAMPAIGN_NOT_FOUND}.
local rid = redis.call('HGET', K_CAMP, 'rid')
if rid and rid == server_id() then return {0} end
if redis.call('EXISTS', K_CAMP) == 0 then return {CAMPAIGN_NOT_FOUND} end
return {1}
