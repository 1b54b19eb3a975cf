-- stats.lua: an event's live counters, read in one step.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME)
-- Returns {generation, waiting, active, admitted_total, serving, last_number, rate, now,
-- sold_out}, or {EVENT_NOT_FOUND}.
local now = now_ms(ARGV[1])
local e = load_event()
if not e then return {EVENT_NOT_FOUND} end
local waiting = waiting_count(e)
local active = redis.call('ZCARD', K_ACT) + e.unc
return {e.gen, waiting, active, e.tot, e.srv, e.seq, eta_rate(e), now, e.so}
