-- seats.lua: an inventory's state in one call, for GET /seats: drops a bounded batch of
-- expired holds, then returns the counters and every taken seat's raw state (the caller
-- reads a held seat whose expiry has passed as available).
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME)
-- Returns {0, now ms, capacity, sold, held, seated, ready, seat, state, seat, state, ...},
-- or {NO_INVENTORY} no inventory.
local now = now_ms(ARGV[1])
local s = load_inv()
if not s then return {NO_INVENTORY} end
sweep(s, now, 200)
local out = {0, now, s.cap, s.sold, s.held, s.seated, s.rdy}
if s.seated == 1 then
  local st = redis.call('HGETALL', K_ST)
  for i = 1, #st do out[#out + 1] = st[i] end
end
return out
