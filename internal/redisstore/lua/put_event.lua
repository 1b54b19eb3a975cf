-- put_event.lua: creates an event's line, or updates the configuration of an existing one
-- (its counters and generation are kept; a configuration older than the stored one is ignored,
-- so a slow writer never reverts a newer change).
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] generation for a new line (0 = update only),
-- ARGV[3] max_active, ARGV[4] admit_rate (/s), ARGV[5] session TTL (ms), ARGV[6] claim TTL (ms),
-- ARGV[7] opens_at (ms, 0 = unset), ARGV[8] closes_at (ms, 0 = unset),
-- ARGV[9] configuration version (a counter kept in SQL), ARGV[10] paused (1 = no admissions),
-- ARGV[11] session_max (ms, 0 = none), ARGV[12] the draw's seed (hex; '' = arrival order): it
-- counts until the line's opening only (settle_opening), and only while nobody was admitted
-- or passed over; then the draw made (or not) stays for the line's life.
-- A new line with durable numbers (queue.LineRecord; absent: numbers unbounded) resumes from
-- them (resume.lua): ARGV[13] seq, ARGV[14] known, ARGV[15] serving, ARGV[16] base,
-- ARGV[17] seq ceiling, ARGV[18] serving ceiling, ARGV[19] the N of the opening's draw
-- (0 = none recorded): the line resumes with that draw when ARGV[12] is its seed.
-- ARGV[20] '1': admission mode auto (queue.EventConfig.Auto): the line keeps the limits its
-- controller set (fields amax, arate, set by set_control.lua) instead of ARGV[3] and ARGV[4];
-- otherwise they are forgotten. ARGV[13..19] are '' when ARGV[20] is given without them.
-- ARGV[21..] the draw's void numbers and the owed queue, pairs number, place (resume.lua).
-- Returns {the line's generation, 1 when this call created the line (else 0)}, or {EVENT_NOT_FOUND}
-- when ARGV[2] is 0 and there is no line.
local now = now_ms(ARGV[1])
local cttl = tonumber(ARGV[6])
local cur = redis.call('HMGET', K_EV, 'gen', 'ver', 'cttl')
local created = false
if not cur[1] then
  if ARGV[2] == '0' then return {EVENT_NOT_FOUND} end
  -- A new line starts clean, even if a partial loss (eviction) left some of its keys behind.
  redis.call('DEL', K_LEFT, K_MARKS, K_ACT, K_BAT, K_BATX, K_USERS, K_SOLD)
  local size = math.max(1, math.floor(tonumber(ARGV[4]) / 10 + 1 - 1e-6)) -- common.lua's bucket_size, whole
  -- The fields join.lua's hot path reads come first: a field read scans the hash from its start
  -- (a listpack, up to hash-max-listpack-entries fields), so they are found soonest.
  redis.call('HSET', K_EV, 'gen', ARGV[2], 'srv', 0, 'rt', 0, 'rate', ARGV[4], 'close', ARGV[8],
    'so', 0, 'opened', 0, 'ph', 0, 'seq', 0, 'tot', 0, 'unc', 0, 'tok', size, 'tokms', now, 'wst', now,
    'wcnt', 0, 'vd', 0, 'pl', 0, 'pn', 0)
  created = true
elseif tonumber(ARGV[9]) < (tonumber(cur[2]) or 0) then
  return {tonumber(cur[1])}
elseif cttl < (tonumber(cur[3]) or 0) then
  -- A shorter claim TTL applies to admissions already waiting to be claimed, too; this keeps
  -- claim deadlines in batch order, which the admission step's sweep relies on.
  local cap = now + cttl
  for _, lo in ipairs(redis.call('ZRANGE', K_BAT, 0, -1)) do
    if (tonumber(redis.call('HGET', K_BATX, 'd' .. lo)) or 0) > cap then
      redis.call('HSET', K_BATX, 'd' .. lo, cap)
    end
  end
end
local max_active, rate = ARGV[3], ARGV[4]
if ARGV[20] == '1' then
  local eff = redis.call('HMGET', K_EV, 'amax', 'arate')
  if eff[1] then max_active, rate = eff[1], eff[2] end
  redis.call('HSET', K_EV, 'auto', 1)
else
  redis.call('HDEL', K_EV, 'amax', 'arate', 'auto')
end
redis.call('HSET', K_EV, 'max', max_active, 'rate', rate, 'sttl', ARGV[5], 'cttl', ARGV[6],
  'open', ARGV[7], 'close', ARGV[8], 'ver', ARGV[9], 'pause', ARGV[10], 'smax', ARGV[11] or 0)
if created and ARGV[13] and ARGV[13] ~= '' then
  restore_draw(tonumber(ARGV[19]) or 0, ARGV[12])
  resume(now, 0, 0, tonumber(ARGV[14]), tonumber(ARGV[13]), tonumber(ARGV[15]), tonumber(ARGV[16]),
    tonumber(ARGV[17]), tonumber(ARGV[18]), cttl, 21)
end
local e = load_event()
if e.opened ~= 1 then
  local seed, drw = ARGV[12] or '', 0
  if seed ~= '' and e.srv == 0 and e.so ~= 1 then drw = 1 end
  e.drw = drw
  redis.call('HSET', K_EV, 'seed', seed, 'drw', drw)
end
settle_opening(e, now)
return {e.gen, created and 1 or 0}
