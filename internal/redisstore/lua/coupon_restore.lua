-- coupon_restore.lua: writes entries as the database holds them (the truth of entries): each
-- user at its number, confirmed; its outcome when decided; queued when pending and neither
-- waiting, taken nor decided. The user's entry at another number, and another user's at this
-- number, are dropped: entries the store made after losing data, which the database refused. A
-- lease on a number whose user changes (a worker holds the other user's task) ends: the number
-- is queued again for its user.
-- (The other user's key may still name the number: coupon_entry.lua and coupon_enter.lua check
-- the number's user.)
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), then per entry 4 values: number, user key, user id, outcome ('' pending,
-- 'R' rejected, 'I<code>' issued)
-- Returns {entries written} or {CAMPAIGN_NOT_FOUND}.
if redis.call('EXISTS', K_CAMP) == 0 then return {CAMPAIGN_NOT_FOUND} end
-- drop removes entry m; admitted goes down by one whatever it was (an undercount only queues
-- entries the worker rejects, an overcount would reject at once an entry there is stock for).
local function drop(m)
  redis.call('HDEL', K_ENT, m)
  redis.call('HDEL', K_RES, m)
  redis.call('ZREM', K_Q, m)
  redis.call('ZREM', K_PROC, m)
  redis.call('HDEL', K_AT, m)
  if tonumber(redis.call('HGET', K_CAMP, 'admitted') or 0) > 0 then
    redis.call('HINCRBY', K_CAMP, 'admitted', -1)
  end
end
local done = 0
for i = 2, #ARGV - 3, 4 do
  local n, key, uid, out = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local old = redis.call('HGET', K_CUSERS, key)
  if old then
    old = math.abs(tonumber(old))
    if old ~= n and redis.call('HGET', K_ENT, old) == uid then drop(old) end
  end
  local cur = redis.call('HGET', K_ENT, n)
  if cur and cur ~= uid then
    redis.call('HDEL', K_RES, n) -- that user's outcome, not this one's
    redis.call('ZREM', K_PROC, n) -- that user's lease
    redis.call('HDEL', K_AT, n) -- and its entry time
  end
  redis.call('HSET', K_CUSERS, key, n)
  redis.call('HSET', K_ENT, n, uid)
  if out ~= '' then
    redis.call('HSET', K_RES, n, out)
    redis.call('ZREM', K_Q, n)
    redis.call('HDEL', K_AT, n)
  elseif redis.call('HEXISTS', K_RES, n) == 0 and not redis.call('ZSCORE', K_PROC, n) then
    redis.call('ZADD', K_Q, n, n)
  end
  done = done + 1
end
return {done}
