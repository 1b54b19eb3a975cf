-- coupon_enter.lua: a user enters the campaign. A new entry takes the next number (entry order
-- comes from this sequence, never from a clock), never above the ceiling reserved in the
-- database, and is queued for issuance, or rejected at once when stock entries are admitted
-- already; it is unconfirmed until the database holds it (coupon_restore.lua). A repeat entry
-- returns the existing one (a user whose number was restored to another user is entered anew).
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] user key, ARGV[3] user id, ARGV[4] block size
-- Returns {created (0/1), number, outcome ('' pending, 'R', 'I<code>'), unconfirmed (0/1)}, with
-- {..., ceiling, incarnation} appended for a new entry when fewer than half a block of numbers
-- are left; or {CAMPAIGN_NOT_FOUND} no such campaign, {NOT_OPEN, opens ms} not open yet,
-- {NEED_CEILING, seq, incarnation, ceiling} every number below the ceiling handed out.
local now = now_ms(ARGV[1])
local c = redis.call('HMGET', K_CAMP, 'seq', 'stock', 'opens', 'ceil', 'admitted', 'inc')
if not c[1] then return {CAMPAIGN_NOT_FOUND} end
local prev = redis.call('HGET', K_CUSERS, ARGV[2])
if prev then
  local n = tonumber(prev)
  local unconfirmed = 0
  if n < 0 then n, unconfirmed = -n, 1 end
  if redis.call('HGET', K_ENT, n) == ARGV[3] then
    return {0, n, redis.call('HGET', K_RES, n) or '', unconfirmed}
  end
end
local opens = tonumber(c[3]) or 0
if opens > 0 and now < opens then return {NOT_OPEN, opens} end
local seq, ceil = tonumber(c[1]), tonumber(c[4]) or 0
if seq >= ceil then return {NEED_CEILING, seq, c[6] or '', ceil} end
local n = seq + 1
redis.call('HSET', K_CUSERS, ARGV[2], -n)
redis.call('HSET', K_ENT, n, ARGV[3])
local out = ''
local admitted = tonumber(c[5]) or 0
if admitted >= tonumber(c[2]) then
  out = 'R'
  redis.call('HSET', K_RES, n, 'R')
  redis.call('HSET', K_CAMP, 'seq', n)
else
  redis.call('HSET', K_CAMP, 'seq', n, 'admitted', admitted + 1)
  redis.call('ZADD', K_Q, n, n)
  redis.call('HSET', K_AT, n, now)
end
if 2 * (ceil - n) < tonumber(ARGV[4]) then return {1, n, out, 1, ceil, c[6] or ''} end
return {1, n, out, 1}
