-- release.lua: the holder frees its hold at once.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] hold id
-- Returns {0} released (an expired hold not yet swept too; one being booked ends with its
-- booking grace: sale_common.lua's release_hold), or {NO_INVENTORY} no inventory,
-- {HOLD_NOT_FOUND} no such hold, {HOLD_NOT_YOURS} another ticket's hold.
local s = load_inv()
if not s then return {NO_INVENTORY} end
local owner, code = ticket_hold(ARGV[4])
if not owner then return {code} end
release_hold(s, ARGV[4], now_ms(ARGV[1])) -- one being booked ends with its booking grace
return {0}
