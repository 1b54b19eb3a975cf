-- book_end.lua: a booking attempt the database refused (nothing was written) ends: the hold's
-- booking grace (book_begin.lua) ends with it, so the hold is back under its own time and its
-- session's rules. It is dropped when its session is no longer live (the ticket left or its
-- session ended meanwhile, which only the grace had kept it past) or its own time is up;
-- otherwise it keeps the expiry it had before its first booking attempt.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] hold id
-- Returns {0} kept, {1} dropped, or {NO_INVENTORY} no inventory, {HOLD_NOT_FOUND} no such
-- hold, {HOLD_NOT_YOURS} another ticket's hold.
local now = now_ms(ARGV[1])
local s = load_inv()
if not s then return {NO_INVENTORY} end
local id = ARGV[4]
local owner, exp, qty, seats = ticket_hold(id)
if not owner then return {exp} end -- ticket_hold answered nil and the code
local gen, n = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('HDEL', K_TH, 'b:' .. id)
local orig = tonumber(redis.call('HGET', K_TH, 'o:' .. id)) or exp
local live = false
local e = load_event()
if e and e.gen == gen then
  local sexp = redis.call('ZSCORE', K_ACT, n)
  live = sexp ~= false and tonumber(sexp) > now
end
if not live or math.min(orig, exp) <= now then
  drop_hold(s, id)
  return {1}
end
if orig < exp then
  redis.call('HSET', K_HOLDS, id, owner .. '|' .. orig .. '|' .. qty .. '|' .. table.concat(seats, ','))
  redis.call('ZADD', K_HEXP, orig, id)
  for _, seat in ipairs(seats) do redis.call('HSET', K_ST, seat, orig .. ':' .. id) end
end
return {0}
