-- admit.lua: one step of the admission processor for one event. Ends idle sessions and
-- unclaimed batches, then moves the serving counter past up to k waiting tickets, where
-- k = min(free slots, waiting, ARGV[2], admit_rate tokens; what late or cut-short steps could
-- not take is made up, see refill in common.lua). The cost does not grow with k:
-- one counter update and one batch record, plus one step per ticket that left inside the range.
-- Any number of processors may call it concurrently: the limits live here, not in the callers.
-- The holds of the sessions it ends are released at once (see release_ticket_hold).
-- KEYS: see common.lua and sale_common.lua (KEYS[9..15] may be absent: no hold is released).
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] largest batch (0 = no cap), ARGV[3] '1' = a step
-- that would pass the durable serving ceiling vc answers NEED_CEILING (the caller reserves
-- in SQL and calls again with '0'), else it stops at vc.
-- Serving never passes vc (docs/durability.md): the ceiling is raised before a step admits,
-- so after a loss everybody up to it may have been told (pending.lua). It is raised to the
-- step's target plus what the next step may admit ("ahead": the slots left free after this
-- step, within a tenth of a second of admit_rate, and no further than the last number), so
-- that the next step rarely waits for SQL; after a loss, those ahead that were not admitted
-- yet are admitted at once, early but within max_active.
-- Places: serving, the batch and the scores of left are places in line (see common.lua).
-- Returns {admitted, first place, new serving, sessions ended, now, seq, seq ceiling,
-- serving ceiling, serving, ahead} (seq ceiling 0 = no durable numbers, and no ceilings; the
-- caller tops the seq ceiling up, and the serving ceiling when ahead is above it), or
-- {NEED_CEILING, seq, target place plus ahead, sessions ended} (ARGV[3]: reserve the serving
-- ceiling up to it, then call again), {EVENT_NOT_FOUND} no such event, {DRAW_LEFT, generation, N, seed hex} the opening's draw is
-- made but the tickets that left before it are not scored by place yet: the caller does it
-- (draw_left.lua) and calls again.
local now = now_ms(ARGV[1])
local e = load_event()
if not e then return {EVENT_NOT_FOUND} end
settle_opening(e, now)
if e.drw == 2 then return draw_moved(e, DRAW_LEFT) end
local ended = 0

-- Idle sessions: bounded per step; the next step takes the rest.
local due = redis.call('ZRANGEBYSCORE', K_ACT, '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  redis.call('ZREM', K_ACT, unpack(due))
  local ops = {}
  for _, n in ipairs(due) do
    ops[#ops + 1] = 'SET'; ops[#ops + 1] = 'u2'; ops[#ops + 1] = '#' .. n; ops[#ops + 1] = 2
  end
  redis.call('BITFIELD', K_MARKS, unpack(ops))
  local fins = {}
  for i, n in ipairs(due) do fins[i] = 'm' .. n end
  redis.call('HDEL', K_BATX, unpack(fins))
  if e.ru > 0 then
    -- Sessions of a rolled-back copy that nobody confirmed leave the pool (resume.lua).
    for i, n in ipairs(due) do fins[i] = 'r' .. n end
    local gone = redis.call('HDEL', K_BATX, unpack(fins))
    if gone > 0 then e.ru = redis.call('HINCRBY', K_EV, 'ru', -gone) end
  end
  ended = ended + #due
  if K_TH then
    for _, n in ipairs(due) do release_ticket_hold(e.gen, tonumber(n), now) end
  end
end

-- Unclaimed batches whose claim deadline passed, oldest first; their admissions nobody
-- claimed are counted in the ev field ux (stats.lua).
local old = redis.call('ZRANGE', K_BAT, 0, 15)
local lapsed = 0
for _, lo in ipairs(old) do
  local v = redis.call('HMGET', K_BATX, 'u' .. lo, 'd' .. lo)
  if (tonumber(v[2]) or 0) > now then break end
  local u = tonumber(v[1]) or 0
  ended = ended + u
  lapsed = lapsed + u
  if tonumber(lo) <= e.ptop then
    e.pu = redis.call('HINCRBY', K_EV, 'pu', -u) -- the pool's (pending.lua)
  else
    e.unc = e.unc - u
  end
  redis.call('ZREM', K_BAT, lo)
  redis.call('HDEL', K_BATX, 'u' .. lo, 'd' .. lo, 'a' .. lo)
end
if lapsed > 0 then redis.call('HINCRBY', K_EV, 'ux', lapsed) end

-- Moving average of admissions per second, for ETAs: a window closes as queue.RateEvents says.
local el = now - e.wst
if el >= 1000 and (e.wcnt >= RATE_EVENTS or el >= RATE_SPAN_MS or e.rt * el >= 2000 * RATE_EVENTS) then
  local r = e.wcnt * 1000 / el
  if e.rt == 0 then e.rt = r else e.rt = 0.7 * e.rt + 0.3 * r end
  e.wst, e.wcnt = now, 0
  redis.call('HSET', K_EV, 'rt', string.format('%.3f', e.rt), 'wst', now, 'wcnt', 0)
end

if e.ph > 0 then
  -- The rest of a pending range after a store loss (pending.lua: 4,096 places a call) comes
  -- first, and alone in this step, at once: it was admitted before the loss.
  -- (The sweep above changed unc in e only; admit_pending writes other fields.)
  if ended > #due then redis.call('HSET', K_EV, 'unc', e.unc) end
  local from = e.pl
  local got, last = admit_pending(e, now)
  if got > 0 then return {got, from, last, ended, now, e.seq, e.sc, e.vc, e.srv, e.srv} end
  return {0, 0, 0, ended, now, e.seq, e.sc, e.vc, e.srv, e.srv}
end

if e.pq > 0 and e.so ~= 1 and is_open(e, now) and not is_closed(e, now) then
  -- Holders of void numbers the serving counter passed, who showed up with the room full
  -- (owe_queue in common.lua): admitted first, in the order they showed up, within the free
  -- slots, the batch cap and admit_rate. A ticket that left meanwhile is dropped.
  local m = math.min(free_slots(e), e.pq)
  local cap = tonumber(ARGV[2])
  if cap > 0 and cap < m then m = cap end
  if e.rate > 0 then
    refill(e, now, true)
    m = math.min(m, math.floor(e.tok + e.owe + 1e-9))
  end
  if m > 0 then
    local list = {}
    for x in string.gmatch(redis.call('HGET', K_BATX, 'pql') or '', '%d+') do list[#list + 1] = x end
    local got, i = 0, 0
    while i < #list and got < m do
      i = i + 1
      local n = tonumber(list[i])
      if mark(n) == 0 and redis.call('HDEL', K_BATX, 'v' .. n) == 1 then
        e.vd = redis.call('HINCRBY', K_EV, 'vd', -1)
        start_session(e, n, now)
        got = got + 1
      end
    end
    local rest = ''
    if i < #list then rest = table.concat(list, ' ', i + 1) .. ' ' end
    redis.call('HSET', K_BATX, 'pql', rest)
    e.pq = redis.call('HINCRBY', K_EV, 'pq', -i)
    if got > 0 then pace_count(e, redis.call('HINCRBY', K_EV, 'tot', got), got) end
    if e.rate > 0 then
      e.tok = e.tok - got
      if e.tok < 0 then e.owe, e.tok = e.owe + e.tok, 0 end
      redis.call('HSET', K_EV, 'tok', e.tok, 'tokms', e.tokms, 'owe', e.owe)
    end
  end
end

local nleft = redis.call('ZCARD', K_LEFT)
local free = free_slots(e)
local k = math.min(free, e.seq - e.srv - nleft)
local demand = k -- everyone the step could admit but for admit_rate, the batch cap and the ceiling
local cap = tonumber(ARGV[2])
if cap > 0 and cap < k then k = cap end
if e.rate > 0 then
  refill(e, now, true)
  k = math.min(k, math.floor(e.tok + e.owe + 1e-9)) -- a sum of fractions may fall a hair short of 1
end
local exact = ARGV[3] == '1'
if e.sc > 0 and not exact then k = math.min(k, e.vc - e.srv) end
-- ahead(t): the serving ceiling the next step may need once serving is at t, having admitted
-- k now (see the header).
local function ahead(t, k)
  local a = math.max(0, free - k)
  if e.rate > 0 then a = math.min(a, math.floor(bucket_size(e.rate))) end
  return math.min(t + a, e.seq)
end
local shut = e.so == 1 or not is_open(e, now) or is_closed(e, now)
if k <= 0 or shut then
  if ended > #due then redis.call('HSET', K_EV, 'unc', e.unc) end
  if e.rate > 0 then
    step_tokens(e, 0, shut or demand <= 0)
    redis.call('HSET', K_EV, 'tok', e.tok, 'tokms', e.tokms, 'owe', e.owe)
  end
  local a = e.srv
  if not shut then a = ahead(e.srv, 0) end
  return {0, 0, 0, ended, now, e.seq, e.sc, e.vc, e.srv, a}
end

-- Move serving past k present tickets, skipping (and forgetting) the places of those that left.
local from = e.srv + 1
local target = e.srv + k
local passed = 0
while passed < nleft do
  local chunk = redis.call('ZRANGE', K_LEFT, passed, passed + 99, 'WITHSCORES')
  local stop = false
  for i = 2, #chunk, 2 do
    if tonumber(chunk[i]) > target then stop = true break end
    target = target + 1
    passed = passed + 1
  end
  if stop or #chunk == 0 then break end
end
if e.sc > 0 and target > e.vc and exact then
  -- The serving ceiling must cover the target before anybody up to it is admitted.
  if ended > #due then redis.call('HSET', K_EV, 'unc', e.unc) end
  return {NEED_CEILING, e.seq, math.max(target, ahead(target, k)), ended}
end
if e.sc > 0 and target > e.vc then
  -- Skipping those who left went past the ceiling: stop at it.
  target = e.vc
  passed = redis.call('ZCOUNT', K_LEFT, '-inf', target)
  k = (target - e.srv) - passed
end
if passed > 0 then redis.call('ZREMRANGEBYRANK', K_LEFT, 0, passed - 1) end
if k <= 0 then
  redis.call('HSET', K_EV, 'srv', target, 'unc', e.unc)
  if e.rate > 0 then -- stopped by the ceiling
    step_tokens(e, 0, false)
    redis.call('HSET', K_EV, 'tok', e.tok, 'tokms', e.tokms, 'owe', e.owe)
  end
  return {0, 0, 0, ended, now, e.seq, e.sc, e.vc, target, ahead(target, 0)}
end

if e.rate > 0 then step_tokens(e, k, k >= demand) end
redis.call('HSET', K_EV, 'srv', target, 'unc', e.unc + k, 'tok', e.tok, 'tokms', e.tokms, 'owe', e.owe)
pace_count(e, redis.call('HINCRBY', K_EV, 'tot', k), k)
redis.call('ZADD', K_BAT, target, from)
redis.call('HSET', K_BATX, 'u' .. from, k, 'd' .. from, now + e.cttl, 'a' .. from, now)
return {k, from, target, ended, now, e.seq, e.sc, e.vc, target, ahead(target, k)}
