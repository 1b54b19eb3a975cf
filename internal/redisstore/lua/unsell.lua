-- unsell.lua: returns a cancelled booking's units (its seats become available) and reopens
-- the line for new joins. A booking not recorded here changes nothing but the reopening.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] booking id, ARGV[3] quantity, ARGV[4..] seats
-- Returns counts (see sale_common.lua), or {NO_INVENTORY} no inventory.
local s = load_inv()
if not s then return {NO_INVENTORY} end
if redis.call('HEXISTS', K_BK, ARGV[2]) == 1 then
  redis.call('HDEL', K_BK, ARGV[2])
  s.sold = redis.call('HINCRBY', K_INV, 'sold', -tonumber(ARGV[3]))
  for i = 4, #ARGV do
    if redis.call('HGET', K_ST, ARGV[i]) == 'S' then redis.call('HDEL', K_ST, ARGV[i]) end
  end
end
if s.sold < s.cap then reopen_line() end
return counts(s, 0)
