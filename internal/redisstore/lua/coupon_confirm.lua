-- coupon_confirm.lua: marks entries confirmed once the database holds them (the hot path's
-- second step: two commands an entry). An entry the store no longer holds unconfirmed at that
-- number (restored, dropped, or lost since) is left as it is.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), then pairs: user key, entry number
-- Returns {entries confirmed}.
local done = 0
for i = 2, #ARGV - 1, 2 do
  if redis.call('HGET', K_CUSERS, ARGV[i]) == '-' .. ARGV[i + 1] then
    redis.call('HSET', K_CUSERS, ARGV[i], ARGV[i + 1])
    done = done + 1
  end
end
return {done}
