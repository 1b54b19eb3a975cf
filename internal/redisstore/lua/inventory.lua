-- inventory.lua: creates or updates an event's inventory. The registry re-puts every event each
-- second, so an unchanged configuration (same signature) costs one HMGET; a seated event's
-- seat list is sent only when the store asks for it.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] signature, ARGV[3] capacity, ARGV[4] max per
-- booking, ARGV[5] hold TTL (ms), ARGV[6] seated (0/1), ARGV[7] the configuration's version,
-- ARGV[8] its epoch (sale.Inventory), ARGV[9] 1 = the seat list follows in ARGV[10..]
-- Returns {changed (0/1), created (0/1), ready (0/1), sold (units)}, or {SEATS_NEEDED} the seat
-- list is needed. A changed capacity sells the line out, or puts it on sale again, when the
-- sold state is known (ready); a changed one drops the holds it no longer sells. An inventory of the stored epoch older than the stored version changes
-- nothing (a writer with a stale copy never reverts a newer configuration).
local s = load_inv()
if s then
  local cur = redis.call('HMGET', K_INV, 'sig', 'ver', 'ep')
  if cur[1] == ARGV[2] then return {0, 0, s.rdy, s.sold} end
  if (cur[3] or '') == ARGV[8] and tonumber(ARGV[7]) < (tonumber(cur[2]) or 0) then
    return {0, 0, s.rdy, s.sold}
  end
end
if ARGV[6] == '1' and ARGV[9] ~= '1' then return {SEATS_NEEDED} end
local created = 0
if not s then
  created = 1
  redis.call('HSET', K_INV, 'sold', 0, 'held', 0, 'rdy', 0)
  s = {rdy = 0, sold = 0}
end
redis.call('HSET', K_INV, 'cap', ARGV[3], 'mpb', ARGV[4], 'httl', ARGV[5], 'seated', ARGV[6], 'sig', ARGV[2],
  'ver', ARGV[7], 'ep', ARGV[8])
redis.call('DEL', K_SEATS)
if ARGV[6] == '1' then
  local i = 10
  while i <= #ARGV do
    local j = math.min(i + 999, #ARGV)
    redis.call('SADD', K_SEATS, unpack(ARGV, i, j))
    i = j + 1
  end
end
-- Holds the new configuration no longer sells are dropped: one on a seat taken off the list,
-- or one of the other kind (seats on an event that now sells a quantity, or the reverse).
-- Booked, such a hold would sell a seat the event no longer has (the database refuses it too:
-- sqlstore's CreateBooking).
if created == 0 then
  local hs = redis.call('HGETALL', K_HOLDS)
  for i = 1, #hs, 2 do
    local _, _, _, seats = parse_hold(hs[i + 1])
    local keep = (#seats > 0) == (ARGV[6] == '1')
    if keep then
      for _, seat in ipairs(seats) do
        if redis.call('SISMEMBER', K_SEATS, seat) == 0 then keep = false; break end
      end
    end
    if not keep then drop_hold(s, hs[i]) end
  end
end
-- A sold state already known follows the new capacity at once, as restore.lua's does: sold
-- out at or below what is sold (everyone waiting is passed over), on sale again above it.
if s.rdy == 1 then
  if s.sold >= tonumber(ARGV[3]) then sell_out_line(load_event()) else reopen_line() end
end
return {1, created, s.rdy, s.sold}
