-- status.lua: reads one ticket; counts as activity of an admitted session (claims it, or
-- extends it by the session TTL).
-- A session it finds ended releases its hold at once (see release_ticket_hold).
-- KEYS: see common.lua and sale_common.lua (KEYS[9..15] may be absent: no hold is released),
-- then KEYS[16] polls (keys.go; needed only with a poll limit).
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] polls per ticket per window ('' or absent = not limited), ARGV[5] window (ms),
-- ARGV[6] N the caller's place was computed for, ARGV[7] the ticket's place in the draw of N
-- (both read only for a ticket of a drawn pre-queue, see ticket_place in common.lua)
-- KEYS[16] polls HASH: ticket number -> reads in the current fixed window, whose start (ms) is
-- the ev field pollw (touched only with a limit; it expires two windows after its window
-- began, and a new line's first limited read clears it, its ev hash having no pollw yet; refused reads
-- count too, which changes nothing: the count is only compared with the limit)
-- Returns the ticket shape of common.lua, or {EVENT_NOT_FOUND} no such event, {TICKET_NOT_FOUND}
-- no such ticket (or left), {RATE_LIMITED, ms until the window ends} the ticket made its reads,
-- {DRAW_MOVED, generation, N, seed hex} the caller's N is not the draw's: call again (without
-- the limit: this read is counted), {DRAW_LEFT, generation, N, seed hex} score the draw's
-- leavers by place (draw_left.lua), then call again (likewise).
--
-- The limit costs a read one more field in the first HMGET and one HINCRBY (a new window: an
-- HSET, an UNLINK of the old counts and a PEXPIRE, once per window); a refused read returns
-- before reading the ticket.
--
-- The hot path comes first, before the helpers of common.lua (see "--@common" there): a
-- ticket still waiting in a settled line reads the event in one HMGET and its mark, counts who
-- left ahead of it only when someone left, and returns. Every other case goes through
-- ticket_status.
local now = now_ms(ARGV[1])
local v = redis.call('HMGET', KEYS[1], 'gen', 'seq', 'srv', 'close', 'rt', 'rate', 'vd', 'ph', 'pollw',
  'opened', 'dn', 'drw')
if not v[1] then return {EVENT_NOT_FOUND} end
local lim = ARGV[4]
if lim and lim ~= '' then
  local win = tonumber(ARGV[5])
  local ws = now - now % win
  if tonumber(v[9]) ~= ws then
    redis.call('HSET', KEYS[1], 'pollw', ws)
    redis.call('UNLINK', KEYS[16])
    redis.call('HSET', KEYS[16], ARGV[3], '1')
    redis.call('PEXPIRE', KEYS[16], 2 * win)
  elseif redis.call('HINCRBY', KEYS[16], ARGV[3], '1') > tonumber(lim) then
    return {RATE_LIMITED, ws + win - now}
  end
end
local n = tonumber(ARGV[3])
-- (After a store loss, void numbers to reclaim, vd > 0, and a pending range, ph > 0: ticket_status;
-- so too a line whose opening is not settled, or whose draw's leavers are not scored by place.)
if v[1] == ARGV[2] and (not v[4] or v[4] == '0') and (not v[7] or v[7] == '0') and (not v[8] or v[8] == '0') and
    v[10] == '1' and v[12] ~= '2' then
  local seq, srv = tonumber(v[2]), tonumber(v[3])
  local p = n
  if v[11] and n <= tonumber(v[11]) then -- in the draw: the caller's place, if its N is the draw's
    p = -1
    if tonumber(ARGV[6]) == tonumber(v[11]) then p = tonumber(ARGV[7]) end
  end
  if p > srv and n <= seq and
      redis.call('BITFIELD_RO', KEYS[3], 'GET', 'u2', '#' .. n)[1] == 0 then
    local nleft = redis.call('ZCARD', KEYS[2])
    local ahead = 0
    if nleft > 0 then ahead = redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. p) end
    -- eta_rate of common.lua, unformatted: rt when measured, else 0 (event.ETA).
    local rate = '0'
    if v[5] ~= '0' and (tonumber(v[5]) or 0) > 0 then rate = v[5] end
    return {1, n, p - srv - ahead, seq - srv - nleft, srv, 0, rate, now, v[1], 0, p}
  end
end
--@common
local e = load_event()
if e.gen ~= tonumber(ARGV[2]) then return {TICKET_NOT_FOUND} end
settle_opening(e, now)
if e.drw == 2 then return draw_moved(e, DRAW_LEFT) end
local p = ticket_place(e, n, ARGV[6], ARGV[7])
if not p then return draw_moved(e) end
local code, pos, u, ended = ticket_status(e, n, p, now)
if code < 0 then return {code} end
if ended and K_TH then release_ticket_hold(e.gen, n, now) end
local waiting = waiting_count(e)
local user
if code == 2 then user = redis.call('HGET', K_USERS .. ':' .. e.gen .. ':r' .. math.floor(n / 128), n % 128) or nil end
return reply(e, n, code, pos, waiting, u, now, 0, p, user)
