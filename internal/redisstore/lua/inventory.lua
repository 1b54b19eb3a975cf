-- inventory.lua: creates or updates an event's inventory. The registry re-puts every event each
-- second, so an unchanged configuration (same signature) costs one HMGET; a seated event's
-- seat list is sent only when the store asks for it.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] signature, ARGV[3] capacity, ARGV[4] max per
-- booking, ARGV[5] hold TTL (ms), ARGV[6] seated (0/1), ARGV[7] 1 = the seat list follows in
-- ARGV[8..]
-- Returns {changed (0/1), created (0/1), ready (0/1), sold (units)}, or {SEATS_NEEDED} the seat
-- list is needed.
local s = load_inv()
if s and redis.call('HGET', K_INV, 'sig') == ARGV[2] then return {0, 0, s.rdy, s.sold} end
if ARGV[6] == '1' and ARGV[7] ~= '1' then return {SEATS_NEEDED} end
local created = 0
if not s then
  created = 1
  redis.call('HSET', K_INV, 'sold', 0, 'held', 0, 'rdy', 0)
  s = {rdy = 0, sold = 0}
end
redis.call('HSET', K_INV, 'cap', ARGV[3], 'mpb', ARGV[4], 'httl', ARGV[5], 'seated', ARGV[6], 'sig', ARGV[2])
redis.call('DEL', K_SEATS)
if ARGV[6] == '1' then
  local i = 8
  while i <= #ARGV do
    local j = math.min(i + 999, #ARGV)
    redis.call('SADD', K_SEATS, unpack(ARGV, i, j))
    i = j + 1
  end
end
return {1, created, s.rdy, s.sold}
