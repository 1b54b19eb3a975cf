-- restore.lua: rebuilds the sold state from the database (recovery after a Redis restart or
-- lost writes). The bookings recorded here become those the database confirmed, plus those
-- recorded here that the database has not cancelled: a booking confirmed after the caller read
-- the database (and already recorded here) is never dropped, so a stale read cannot make a sold
-- seat available. Seats of the recorded bookings are sold (holds on them are dropped), the sold
-- counter is their sum, the line's sold-out flag follows, and the inventory becomes ready.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] number of confirmed bookings k, then k triples:
-- booking id, quantity, seats (comma-separated, '' for general admission); then the ids of
-- the bookings the database cancelled
-- Returns counts (see sale_common.lua), or {NO_INVENTORY} no inventory.
local s = load_inv()
if not s then return {NO_INVENTORY} end
local k = tonumber(ARGV[2])
for b = 0, k - 1 do
  redis.call('HSET', K_BK, ARGV[3 + 3 * b], ARGV[4 + 3 * b] .. '|' .. ARGV[5 + 3 * b])
end
for i = 3 + 3 * k, #ARGV do redis.call('HDEL', K_BK, ARGV[i]) end
local st = redis.call('HGETALL', K_ST)
for i = 1, #st, 2 do
  if st[i + 1] == 'S' then redis.call('HDEL', K_ST, st[i]) end
end
local sold = 0
local bk = redis.call('HGETALL', K_BK)
for i = 1, #bk, 2 do
  local qty, seats = string.match(bk[i + 1], '^(%d+)|?(.*)$')
  sold = sold + tonumber(qty)
  for _, seat in ipairs(split(seats)) do
    local cur = redis.call('HGET', K_ST, seat)
    if cur and cur ~= 'S' then
      local _, hid = parse_state(cur)
      drop_hold(s, hid)
    end
    redis.call('HSET', K_ST, seat, 'S')
  end
end
s.sold = sold
redis.call('HSET', K_INV, 'sold', sold, 'rdy', 1)
local passed = 0
if sold >= s.cap then passed = sell_out_line(load_event()) else reopen_line() end
return counts(s, passed)
