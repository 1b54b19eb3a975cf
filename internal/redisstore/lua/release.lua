-- release.lua: the holder frees its hold at once.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] hold id
-- Returns {0} released (an expired hold not yet swept too), or {-10} no inventory, {-20} no
-- such hold, {-21} another ticket's hold.
local s = load_inv()
if not s then return {-10} end
local v = redis.call('HGET', K_HOLDS, ARGV[4])
if not v then return {-20} end
local owner = parse_hold(v)
if owner ~= ARGV[2] .. ':' .. ARGV[3] then return {-21} end
drop_hold(s, ARGV[4])
return {0}
