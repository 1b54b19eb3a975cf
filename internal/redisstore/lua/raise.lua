-- raise.lua: raises a line's ceilings (queue.LineRecord) to what was just reserved in SQL, on
-- the server the line was resumed on only: a line on another server (a restart or failover not
-- yet seen) must be resumed first (recover.lua), or it would hand out numbers again.
-- KEYS: see common.lua. ARGV[1] seq ceiling, ARGV[2] serving ceiling.
-- Returns {0} raised (or already higher), {1} resume first, or {EVENT_NOT_FOUND}.
local v = redis.call('HMGET', K_EV, 'gen', 'rid', 'sc', 'vc')
if not v[1] then return {EVENT_NOT_FOUND} end
if v[2] ~= string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') then return {1} end
local sc, vc = tonumber(ARGV[1]), tonumber(ARGV[2])
if sc > (tonumber(v[3]) or 0) then redis.call('HSET', K_EV, 'sc', sc) end
if vc > (tonumber(v[4]) or 0) then redis.call('HSET', K_EV, 'vc', vc) end
return {0}
