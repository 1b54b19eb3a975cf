-- status.lua: reads one ticket; counts as activity of an admitted session (claims it, or
-- extends it by the session TTL).
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number
-- Returns the ticket shape of common.lua, or {-1} no such event, {-2} no such ticket (or left).
local now = now_ms(ARGV[1])
local e = load_event()
if not e then return {-1} end
if e.gen ~= tonumber(ARGV[2]) then return {-2} end
local n = tonumber(ARGV[3])
local code, pos, u = ticket_status(e, n, now)
if code < 0 then return {code} end
local waiting = e.seq - e.srv - redis.call('ZCARD', K_LEFT)
return reply(e, n, code, pos, waiting, u, now, 0)
