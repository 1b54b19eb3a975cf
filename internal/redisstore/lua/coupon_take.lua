-- coupon_take.lua: leases up to n entries to a worker: first entries whose lease ran out (their
-- worker died or stalled), then the oldest waiting ones. Nothing is popped for good: an entry
-- stays in the processing set until its outcome is recorded (coupon_record.lua). Entries
-- decided meanwhile (coupon_restore.lua) are dropped from the sets instead.
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] n, ARGV[3] lease (ms)
-- Returns {number, user id, waited ms, number, user id, waited ms, ...} in entry order (waited: since
-- the entry was queued, -1 when unknown: an entry restored after a loss), or {CAMPAIGN_NOT_FOUND}
-- no such campaign.
local now = now_ms(ARGV[1])
if redis.call('EXISTS', K_CAMP) == 0 then return {CAMPAIGN_NOT_FOUND} end
local n, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local got = {}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', K_PROC, '-inf', now, 'LIMIT', 0, n)) do
  if redis.call('HEXISTS', K_RES, m) == 1 then
    redis.call('ZREM', K_PROC, m)
  else
    got[#got + 1] = tonumber(m)
  end
end
while #got < n do
  local popped = redis.call('ZPOPMIN', K_Q, n - #got)
  if #popped == 0 then break end
  for i = 1, #popped, 2 do
    if redis.call('HEXISTS', K_RES, popped[i]) == 0 then got[#got + 1] = tonumber(popped[i]) end
  end
end
table.sort(got)
local out = {}
for _, m in ipairs(got) do
  redis.call('ZADD', K_PROC, now + lease, m)
  out[#out + 1] = m
  out[#out + 1] = redis.call('HGET', K_ENT, m) or ''
  local at = tonumber(redis.call('HGET', K_AT, m))
  out[#out + 1] = at and (now - at) or -1
end
return out
