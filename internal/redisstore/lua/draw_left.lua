-- draw_left.lua: scores by place the tickets that left a drawn pre-queue before its opening
-- (settle_opening left them scored by number, drw 2), a chunk at a time: the Go side computes
-- the places (Store.scoreLeft). Repeating a chunk, or two callers at once, change nothing.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] N, ARGV[4] 1 = the last
-- chunk (then admissions may go on: drw 0), ARGV[5..] pairs place, number
-- Returns {0} (also when the line is not, or no longer, in that state).
local e = load_event()
if not e or e.gen ~= tonumber(ARGV[2]) or e.dn ~= tonumber(ARGV[3]) or e.drw ~= 2 then return {0} end
if #ARGV > 4 then
  -- XX: a ticket no longer there (a sell-out emptied left) is not put back.
  redis.call('ZADD', K_LEFT, 'XX', unpack(ARGV, 5))
end
if ARGV[4] == '1' then redis.call('HSET', K_EV, 'drw', 0) end
return {0}
