-- leave.lua: a ticket leaves: its place in line, or its admitted slot and its hold (see
-- release_ticket_hold in sale_common.lua), is freed at once.
-- KEYS: see common.lua and sale_common.lua (KEYS[9..15] may be absent: no hold is released).
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] N and ARGV[5] the ticket's place in the draw of N (see status.lua)
-- A ticket that leaves while waiting is counted in the ev field lw (stats.lua).
-- Returns {0} left, {EVENT_NOT_FOUND} no such event, {TICKET_NOT_FOUND} no such ticket (or already left),
-- {DRAW_MOVED, generation, N, seed hex} the caller's N is not the draw's: call again.
local now = now_ms(ARGV[1])
local e, n, m, p = ticket_of(now)
if not e then return n end
if m == 1 then return {TICKET_NOT_FOUND} end
if p == 0 then
  redis.call('ZADD', K_LEFT, n, n) -- the draw is pending: scored by number until the opening
  redis.call('HINCRBY', K_EV, 'lw', 1)
elseif p > e.srv then
  redis.call('ZADD', K_LEFT, p, n)
  redis.call('HINCRBY', K_EV, 'lw', 1)
elseif e.ph > 0 and p >= e.pl and p <= e.ph and n <= e.dn then
  -- In the pending range of a resume, at a drawn place: flagged by place (see pending.lua).
  if m == 0 then redis.call('HSET', K_BATX, 'x' .. p, 1) end
else
  if redis.call('ZREM', K_ACT, n) == 0 and m == 0 then
    local lo, deadline = batch_of(p)
    if lo and deadline > now then release(e, lo) end
  else
    redis.call('HDEL', K_BATX, 'm' .. n)
    unpool(e, n)
  end
  if K_TH then release_ticket_hold(e.gen, n, now) end
end
set_mark(n, 1)
return {0}
