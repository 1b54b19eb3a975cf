-- book_commit.lua: records a booking the database confirmed: its seats are sold (a hold of
-- someone else on one of them is dropped), the sold counter grows, the ticket's holds are gone
-- (the one booked, and one made while the booking ran),
-- its session ends as COMPLETED (freeing the slot), and selling the last unit marks the line
-- sold out (passing over every waiting ticket). A booking already recorded only completes the
-- ticket again: retries are safe.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] hold id, ARGV[5] booking id, ARGV[6] quantity, ARGV[7..] seats
-- Returns counts (see sale_common.lua), or {NO_INVENTORY} no inventory.
local now = now_ms(ARGV[1])
local s = load_inv()
if not s then return {NO_INVENTORY} end
local gen, n, id, bid, qty = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], tonumber(ARGV[6])
if redis.call('HEXISTS', K_BK, bid) == 1 then
  complete_ticket(gen, n)
  return counts(s, 0)
end
redis.call('HSET', K_BK, bid, qty .. '|' .. table.concat(ARGV, ',', 7))
local v = redis.call('HGET', K_HOLDS, id)
if v and parse_hold(v) == gen .. ':' .. n then drop_hold(s, id) end
-- A hold the ticket made while this booking ran ends with its session: a ticket books once.
local other = redis.call('HGET', K_TH, gen .. ':' .. n)
if other then drop_hold(s, other) end
for i = 7, #ARGV do
  local cur = redis.call('HGET', K_ST, ARGV[i])
  if cur and cur ~= 'S' then
    local _, hid = parse_state(cur)
    drop_hold(s, hid)
  end
  redis.call('HSET', K_ST, ARGV[i], 'S')
end
s.sold = redis.call('HINCRBY', K_INV, 'sold', qty)
complete_ticket(gen, n)
local passed = 0
if s.sold >= s.cap then passed = sell_out_line(load_event()) end
return counts(s, passed)
