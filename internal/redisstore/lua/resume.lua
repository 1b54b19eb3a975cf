-- resume.lua: helpers of put_event.lua and recover.lua, which resume a line after its Redis
-- lost data (a restart with no data, a failover to a replica missing the last writes, an older
-- snapshot). The figures come from SQL (queue.LineRecord; docs/durability.md).

-- A line records the server it was last resumed on (ev field rid, server_id in server.lua), so
-- that a restart or failover is seen.

-- A line whose opening drew its pre-queue resumes with that draw (its N from SQL, restore_draw):
-- serving, its checkpoint and the pending range are places (common.lua), and the known numbers
-- include the draw's N (all handed out but the draw's void numbers, dv below), so every other
-- void number is past the draw, at its number.

-- restore_draw gives a line the draw its opening made: N tickets (SQL's queue.LineRecord.DrawN,
-- 0 = none recorded) drawn with seed (hex; '' = none known: nothing to restore). The line is
-- opened; drw 2 when it holds tickets that left, which an older copy (from before the opening)
-- scored by number: the Go side scores them by place (draw_left.lua) before the line is resumed.
-- Returns the line's drw.
local function restore_draw(n, seed)
  local v = redis.call('HMGET', K_EV, 'dn', 'drw', 'opened', 'seed')
  if n <= 0 or (seed or '') == '' then return tonumber(v[2]) or 0 end
  if tonumber(v[1]) == n then
    if v[3] ~= '1' then redis.call('HSET', K_EV, 'opened', 1) end
    return tonumber(v[2]) or 0
  end
  local drw = 0
  if redis.call('ZCARD', K_LEFT) > 0 then drw = 2 end
  redis.call('HSET', K_EV, 'opened', 1, 'dn', n, 'drw', drw, 'seed', seed)
  return drw
end

-- resume moves the line's counters past what the store may have lost:
--   seq      ticket numbers up to it may have been handed out (the SQL ceiling);
--   known    numbers up to it were handed out for sure (the line's own seq, or SQL's mark,
--            and at least srv); those in (known, seq] are void: skipped by positions and
--            admissions (kept in K_LEFT) until their holder shows up (ticket_status);
--   srv      the serving counter resumes here (the SQL ceiling, raised to exactly what each
--            admission step admits before it admits: nobody was admitted above it);
--   base     tickets in (base, srv] not void and not left become the pending range
--            (pending.lua), admitted at once into the pool: those admitted before the loss
--            claim their session again, those still waiting are admitted early;
--   sc, vc   the new ceilings (already reserved in SQL).
--   dvi      the draw's void numbers (queue.LineRecord.DrawVoid: a loss before the opening
--            made them void, and the opening drew them at places nobody holds, their holders
--            not shown up since) and the owed queue at the checkpoint (Owed: their holders are
--            owed their admission again): ARGV[dvi..] pairs number, place (the Go side computes
--            the places), void again but those the line's own copy holds (up to cur_seq).
-- cur_seq/cur_srv are the line's own counters (0 for a line created now). Returns the number
-- of void numbers.
local function resume(now, cur_seq, cur_srv, known, seq, srv, base, sc, vc, cttl, dvi)
  if cur_seq > 0 then
    -- A rolled-back copy: its sessions may have ended since (a booking, a leave the copy lost).
    -- Each must be claimed again within the claim TTL by its holder's next request, or it ends;
    -- until then it is in the pool (ru, r<n>: counted within what is left of max_active), and
    -- so are the copy's unclaimed admissions (its batches, all at or below srv: pu).
    local act = redis.call('ZRANGE', K_ACT, 0, -1)
    local ops = {}
    local flagged = 0
    for _, m in ipairs(act) do
      ops[#ops + 1] = now + cttl
      ops[#ops + 1] = m
      flagged = flagged + redis.call('HSETNX', K_BATX, 'r' .. m, 1)
      if #ops >= 1024 then
        redis.call('ZADD', K_ACT, 'LT', unpack(ops))
        ops = {}
      end
    end
    if #ops > 0 then redis.call('ZADD', K_ACT, 'LT', unpack(ops)) end
    local cur = redis.call('HMGET', K_EV, 'unc', 'pu', 'ru')
    redis.call('HSET', K_EV, 'unc', 0, 'pu', (tonumber(cur[1]) or 0) + (tonumber(cur[2]) or 0),
      'ru', (tonumber(cur[3]) or 0) + flagged)
  end
  if seq < cur_seq then seq = cur_seq end
  if known < cur_seq then known = cur_seq end
  if known > seq then known = seq end
  if srv < cur_srv then srv = cur_srv end
  if srv > seq then srv = seq end
  if base < cur_srv then base = cur_srv end
  if base > srv then base = srv end
  -- Every number up to the serving ceiling was handed out: a step never reserves serving past
  -- the last number (admit.lua). Only numbers above it can be void.
  if known < srv then known = srv end
  local nv = 0
  local fields, members = {}, {}
  local function flush(all)
    if #fields >= 512 or (all and #fields > 0) then
      redis.call('HSET', K_BATX, unpack(fields))
      fields = {}
    end
    if #members >= 512 or (all and #members > 0) then
      redis.call('ZADD', K_LEFT, unpack(members))
      members = {}
    end
  end
  -- make_void flags number n void (batx v<n>) and puts it in left at place p, unless p is 0
  -- (passed by serving: it is owed its admission when its holder shows up, ticket_status).
  local function make_void(n, p)
    fields[#fields + 1] = 'v' .. n
    fields[#fields + 1] = 1
    if p > 0 then
      members[#members + 1] = p
      members[#members + 1] = n
    end
    nv = nv + 1
    flush(false)
  end
  for n = known + 1, seq do make_void(n, n) end -- all above srv
  local vlo, vhi = known + 1, seq
  -- The draw's void numbers and the owed queue at the checkpoint, at their places: those past
  -- base are in left (skipped by positions; the pending range's, flagged by place below).
  for i = dvi, #ARGV - 1, 2 do
    local n, p = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if n > cur_seq and n <= known then
      if p <= base then p = 0 end
      make_void(n, p)
      if n < vlo then vlo = n end
      if n > vhi then vhi = n end
    end
  end
  flush(true)
  if srv > base then
    -- Those who left inside (base, srv] are skipped by their marks; void numbers there are
    -- not counted.
    local passed = redis.call('ZCOUNT', K_LEFT, '(' .. base, srv)
    if passed > 0 then
      local dn = tonumber(redis.call('HGET', K_EV, 'dn')) or 0
      if dn > 0 then
        -- Those of the draw are flagged by place (pending.lua reads no mark of a drawn place).
        local ls = redis.call('ZRANGEBYSCORE', K_LEFT, '(' .. base, srv, 'WITHSCORES')
        for i = 1, #ls, 2 do
          if tonumber(ls[i]) <= dn then redis.call('HSET', K_BATX, 'x' .. ls[i + 1], 1) end
        end
      end
      redis.call('ZREMRANGEBYSCORE', K_LEFT, '(' .. base, srv)
    end
    local k = (srv - base) - passed
    local cur = redis.call('HMGET', K_EV, 'pl', 'ph', 'pn')
    local pl, ph, pn = base + 1, srv, math.max(0, k)
    if (tonumber(cur[2]) or 0) > 0 then
      -- A second loss before the first's pending range was admitted: it goes on from there.
      pl, pn = math.min(pl, tonumber(cur[1])), pn + (tonumber(cur[3]) or 0)
    end
    redis.call('HSET', K_EV, 'pl', pl, 'ph', ph, 'pn', pn)
  end
  redis.call('HSET', K_EV, 'seq', seq, 'srv', srv, 'sc', math.max(sc, seq), 'vc', math.max(vc, srv), 'rid', server_id(),
    'ptop', srv)
  if nv > 0 then
    redis.call('HINCRBY', K_EV, 'vd', nv)
    redis.call('HSET', K_EV, 'vlo', vlo, 'vhi', vhi) -- for the push hubs (stats.lua)
  end
  -- The pending range is admitted at once: those admitted before the loss keep going.
  admit_pending(load_event(), now)
  return nv
end
