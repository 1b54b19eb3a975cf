-- stats.lua: an event's live counters, read in one step.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME)
-- Returns {generation, waiting, active, admitted_total, serving, last_number, rate, now,
-- sold_out, draw pending (1/0), N drawn, seed hex ('' unless the opening drew), first void
-- number, last void number (0, 0: none left, resume.lua), tickets that left while waiting
-- (lw, leave.lua), admissions that ended unclaimed (ux, admit.lua)}, or
-- {EVENT_NOT_FOUND}. It settles the opening when due (settle_opening).
local now = now_ms(ARGV[1])
local e = load_event()
if not e then return {EVENT_NOT_FOUND} end
settle_opening(e, now)
local waiting = waiting_count(e)
local active = counted_active(e)
local dpend, seed = 0, ''
if e.drw == 1 then dpend = 1 end
if e.drawn then seed = redis.call('HGET', K_EV, 'seed') or '' end
local vlo, vhi = 0, 0
if e.vd > 0 then
  local v = redis.call('HMGET', K_EV, 'vlo', 'vhi')
  vlo, vhi = tonumber(v[1]) or 0, tonumber(v[2]) or 0
end
local gone = redis.call('HMGET', K_EV, 'lw', 'ux')
return {e.gen, waiting, active, e.tot, e.srv, e.seq, eta_rate(e), now, e.so, dpend, e.dn, seed, vlo, vhi,
  tonumber(gone[1]) or 0, tonumber(gone[2]) or 0}
