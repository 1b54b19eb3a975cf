-- coupon_record.lua: stores the outcomes of taken entries (first outcome wins) and ends their
-- leases; counts issued and rejected entries once each.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2..] pairs: entry number, outcome ('I<code>' or 'R')
-- Returns {entries newly recorded}.
local done = 0
for i = 2, #ARGV - 1, 2 do
  local m, out = ARGV[i], ARGV[i + 1]
  if redis.call('HSETNX', K_RES, m, out) == 1 then
    done = done + 1
    if string.sub(out, 1, 1) == 'I' then
      redis.call('HINCRBY', K_CAMP, 'issued', 1)
    else
      redis.call('HINCRBY', K_CAMP, 'rejected', 1)
    end
  end
  redis.call('ZREM', K_PROC, m)
  redis.call('ZREM', K_Q, m)
  redis.call('HDEL', K_AT, m)
end
return {done}
