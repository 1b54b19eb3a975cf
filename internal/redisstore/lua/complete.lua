-- complete.lua: an admitted session ends with a sale: the ticket reads COMPLETED for good and
-- its slot is freed for the next in line.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] N and ARGV[5] the ticket's place in the draw of N (see status.lua)
-- Returns {0} completed (or already completed), {EVENT_NOT_FOUND} no such event, {TICKET_NOT_FOUND} no such ticket,
-- {NOT_ADMITTED} the ticket holds no live admission, {DRAW_MOVED, generation, N, seed hex} the
-- caller's N is not the draw's: call again.
local now = now_ms(ARGV[1])
local e, n, m, p = ticket_of(now, 3)
if not e then return n end
if m == 3 then return {0} end
if m == 1 then return {TICKET_NOT_FOUND} end
if m ~= 0 or p == 0 or p > e.srv then return {NOT_ADMITTED} end
local exp = redis.call('ZSCORE', K_ACT, n)
if exp then
  redis.call('ZREM', K_ACT, n)
  redis.call('HDEL', K_BATX, 'm' .. n)
  unpool(e, n)
  if tonumber(exp) <= now then
    set_mark(n, 2)
    return {NOT_ADMITTED}
  end
else
  local lo, deadline = batch_of(p)
  if not lo or deadline <= now then return {NOT_ADMITTED} end
  release(e, lo)
end
set_mark(n, 3)
return {0}
