-- book_begin.lua: before a booking is written to the database, checks that the hold is the
-- ticket's, unexpired and intact (every seat still held by it) and that the ticket's session
-- is live, and keeps the hold for a grace period (the database write runs meanwhile), also if
-- the session ends meanwhile (see release_ticket_hold in sale_common.lua), but never past the
-- hold's own expiry plus one grace.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] hold id, ARGV[5] grace (ms)
-- Returns {0, hold expiry ms, quantity, the inventory's epoch, seat...}, or {NO_INVENTORY} no inventory, {NOT_READY} not ready,
-- {HOLD_NOT_FOUND} no such hold, {HOLD_NOT_YOURS} another ticket's hold, {HOLD_EXPIRED} hold expired or broken,
-- {TICKET_NOT_FOUND} no such ticket, {NOT_ADMITTED} no live admission.
local now = now_ms(ARGV[1])
local s = load_inv()
if not s then return {NO_INVENTORY} end
if s.rdy ~= 1 then return {NOT_READY} end
local id = ARGV[4]
local owner, exp, qty, seats = ticket_hold(id)
if not owner then return {exp} end -- ticket_hold answered nil and the code
local gen, n = tonumber(ARGV[2]), tonumber(ARGV[3])
if exp <= now then
  drop_hold(s, id)
  return {HOLD_EXPIRED}
end
for _, seat in ipairs(seats) do
  local cur = redis.call('HGET', K_ST, seat)
  local _, hid = nil, nil
  if cur then _, hid = parse_state(cur) end
  if hid ~= id then return {HOLD_EXPIRED} end
end
local e = load_event()
if not e then return {NOT_ADMITTED} end
if e.gen ~= gen then return {TICKET_NOT_FOUND} end
local sexp = redis.call('ZSCORE', K_ACT, n)
if not sexp or tonumber(sexp) <= now then return {NOT_ADMITTED} end
-- The grace runs from this attempt, but no attempt keeps the hold past its own time plus one
-- grace ('o:<id>': its expiry before the first attempt), so failing bookings retried cannot
-- keep it for the whole session.
local grace = tonumber(ARGV[5])
local orig = tonumber(redis.call('HGET', K_TH, 'o:' .. id))
if not orig then
  orig = exp
  redis.call('HSET', K_TH, 'o:' .. id, orig)
end
local pinned = math.min(now + grace, orig + grace)
redis.call('HSET', K_TH, 'b:' .. id, pinned)
if pinned > exp then
  exp = pinned
  redis.call('HSET', K_HOLDS, id, owner .. '|' .. exp .. '|' .. qty .. '|' .. table.concat(seats, ','))
  redis.call('ZADD', K_HEXP, exp, id)
  for _, seat in ipairs(seats) do redis.call('HSET', K_ST, seat, exp .. ':' .. id) end
end
return {0, exp, qty, redis.call('HGET', K_INV, 'ep') or '', unpack(seats)}
