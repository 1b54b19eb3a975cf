-- coupon_enter.lua: a user enters the campaign. A new entry takes the next number (entry order
-- comes from this sequence, never from a clock) and is queued for issuance, or rejected at once
-- when its number is beyond the stock (the first stock entrants are the ones who get coupons);
-- a repeat entry returns the existing one.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] user key, ARGV[3] user id
-- Returns {created (0/1), number, outcome ('' pending, 'R', 'I<code>')}, or {CAMPAIGN_NOT_FOUND} no such
-- campaign, {NOT_OPEN, opens ms} not open yet.
local now = now_ms(ARGV[1])
local c = redis.call('HMGET', K_CAMP, 'seq', 'stock', 'opens')
if not c[1] then return {CAMPAIGN_NOT_FOUND} end
local stock, opens = tonumber(c[2]), tonumber(c[3]) or 0
local prev = redis.call('HGET', K_CUSERS, ARGV[2])
if prev then
  return {0, tonumber(prev), redis.call('HGET', K_RES, prev) or ''}
end
if opens > 0 and now < opens then return {NOT_OPEN, opens} end
local n = redis.call('HINCRBY', K_CAMP, 'seq', 1)
redis.call('HSET', K_CUSERS, ARGV[2], n)
redis.call('HSET', K_ENT, n, ARGV[3])
if n > stock then
  redis.call('HSET', K_RES, n, 'R')
  redis.call('HINCRBY', K_CAMP, 'rejected', 1)
  return {1, n, 'R'}
end
redis.call('ZADD', K_Q, n, n)
redis.call('HSET', K_AT, n, now)
return {1, n, ''}
