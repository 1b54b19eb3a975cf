-- stats.lua: an event's live counters, read in one step.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME)
-- Returns {generation, waiting, active, admitted_total, serving, last_number, rate, now,
-- sold_out, draw pending (1/0), N drawn, seed hex ('' unless the opening drew), first void
-- number, last void number (0, 0: none left, resume.lua), tickets that left while waiting
-- (lw, leave.lua), admissions that ended unclaimed (ux, admit.lua), void numbers left (vd)}, or
-- {EVENT_NOT_FOUND}. It settles the opening when due (settle_opening).
-- ARGV[2] '1': the line's view (queue.View) too, after those: plain (1/0: a waiting ticket's
-- position is status.lua's hot path's: opened, draw's leavers scored, no close, no pending
-- range, no void numbers, not sold out), max_active, admit_rate, the count of left, the ms
-- until the polls' window ends, the count of tickets over the poll limit and their numbers,
-- then, when the count of left is at most ARGV[3], the places of left (its scores), ascending.
-- ARGV[4] the line generation of the polls, ARGV[5] polls per ticket per window, ARGV[6] the
-- window (ms), ARGV[7..] pairs of a ticket number and its reads answered from an earlier view:
-- counted in KEYS[16] polls as status.lua counts (its window, ev field pollw), none refused;
-- those past the limit are named. Not counted when ARGV[4] is not the line's generation.
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
local owed = ''
if e.pq > 0 then owed = redis.call('HGET', K_BATX, 'pql') or '' end
local r = {e.gen, waiting, active, e.tot, e.srv, e.seq, eta_rate(e), now, e.so, dpend, e.dn, seed, vlo, vhi,
  tonumber(gone[1]) or 0, tonumber(gone[2]) or 0, e.vd, owed}
if ARGV[2] ~= '1' then return r end
local plain = 0
if e.opened == 1 and e.drw == 0 and e.close == 0 and e.vd == 0 and e.ph == 0 and e.so ~= 1 then plain = 1 end
local nleft = redis.call('ZCARD', K_LEFT)
r[19], r[20], r[21], r[22], r[23], r[24] = plain, e.max, string.format('%.6f', e.rate), nleft, 0, 0
if #ARGV >= 8 and tonumber(ARGV[4]) == e.gen then
  local lim, win = tonumber(ARGV[5]), tonumber(ARGV[6])
  local ws = now - now % win
  if tonumber(redis.call('HGET', K_EV, 'pollw')) ~= ws then
    redis.call('HSET', K_EV, 'pollw', ws)
    redis.call('UNLINK', KEYS[16])
  end
  for i = 7, #ARGV - 1, 2 do
    if redis.call('HINCRBY', KEYS[16], ARGV[i], ARGV[i + 1]) > lim then
      r[#r + 1] = tonumber(ARGV[i])
      r[24] = r[24] + 1
    end
  end
  redis.call('PEXPIRE', KEYS[16], ws + 2 * win - now)
  r[23] = ws + win - now
end
if nleft > 0 and nleft <= tonumber(ARGV[3]) then
  local z = redis.call('ZRANGE', K_LEFT, 0, -1, 'WITHSCORES')
  for i = 2, #z, 2 do r[#r + 1] = tonumber(z[i]) end
end
return r
