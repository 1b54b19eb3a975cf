-- join.lua: a person joins the line; admitted at once when a slot and an admission are free,
-- the event is open and nobody waits ahead, else appended. Order = the per-event sequence.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME)
-- ARGV[2] user key ('' = anonymous): the same user gets its live ticket back (created = 0)
-- Returns the ticket shape of common.lua, or {-1} no such event, {-3} event closed,
-- {-4} sold out.
local now = now_ms(ARGV[1])
local e = load_event()
if not e then return {-1} end
if is_closed(e, now) then return {-3} end
if e.so == 1 then return {-4} end
local ukey = ARGV[2]
if ukey ~= '' then
  local prev = tonumber(redis.call('HGET', K_USERS, ukey))
  if prev then
    local code, pos, u = ticket_status(e, prev, now)
    if code == 1 or code == 2 then
      local waiting = e.seq - e.srv - redis.call('ZCARD', K_LEFT)
      return reply(e, prev, code, pos, waiting, u, now, 0)
    end
  end
end
local nleft = redis.call('ZCARD', K_LEFT)
local before = e.seq - e.srv - nleft
local n = redis.call('HINCRBY', K_EV, 'seq', 1)
e.seq = n
if ukey ~= '' then redis.call('HSET', K_USERS, ukey, n) end
if before == 0 and is_open(e, now) and free_slots(e) > 0 then
  local ok = true
  if e.rate > 0 then
    refill(e, now)
    ok = e.tok >= 1
    if ok then e.tok = e.tok - 1 end
  end
  if ok then
    if nleft > 0 then redis.call('DEL', K_LEFT) end
    e.srv = n
    redis.call('HSET', K_EV, 'srv', n, 'tok', e.tok, 'tokms', e.tokms)
    redis.call('HINCRBY', K_EV, 'tot', 1)
    redis.call('HINCRBY', K_EV, 'wcnt', 1)
    local u = now + e.sttl
    redis.call('ZADD', K_ACT, u, n)
    return reply(e, n, 2, 0, 0, u, now, 1)
  end
end
return reply(e, n, 1, before + 1, before + 1, 0, now, 1)
