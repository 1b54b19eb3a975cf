-- recover.lua: resumes an existing line after its Redis may have lost writes (a restart from an
-- older snapshot, a failover to a lagging replica): the line records the server it was last
-- resumed on (rid); on another server it is resumed from the SQL figures (resume.lua).
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] 1 = check only
-- ARGV[3] SQL seq ceiling, ARGV[4] SQL serving ceiling, ARGV[5] SQL seq mark,
-- ARGV[6] new seq ceiling, ARGV[7] new serving ceiling (reserved in SQL, >= the old ones),
-- ARGV[8] the N of the opening's draw in SQL (0 = none recorded; restore_draw in resume.lua),
-- ARGV[9..] the draw's void numbers and the owed queue, pairs number, place (resume.lua)
-- Returns {0} the line is on this server already (the ceilings raised to ARGV[6..7] unless
-- check only), {1, seq, serving} check only: the line needs resuming, {2, void numbers}
-- resumed, {DRAW_LEFT, generation, N, seed hex} the copy's tickets that left before the opening
-- are to be scored by place first (draw_left.lua), then call again, or {EVENT_NOT_FOUND}.
local now = now_ms(ARGV[1])
local v = redis.call('HMGET', K_EV, 'gen', 'rid', 'seq', 'srv', 'cttl', 'sc', 'vc')
if not v[1] then return {EVENT_NOT_FOUND} end
if v[2] and v[2] == server_id() then
  if ARGV[2] ~= '1' then
    local sc, vc = tonumber(ARGV[6]), tonumber(ARGV[7])
    if sc > (tonumber(v[6]) or 0) then redis.call('HSET', K_EV, 'sc', sc) end
    if vc > (tonumber(v[7]) or 0) then redis.call('HSET', K_EV, 'vc', vc) end
  end
  return {0}
end
local seq, srv = tonumber(v[3]) or 0, tonumber(v[4]) or 0
if ARGV[2] == '1' then return {1, seq, srv} end
if restore_draw(tonumber(ARGV[8]) or 0, redis.call('HGET', K_EV, 'seed') or '') == 2 then
  return draw_moved(load_event(), DRAW_LEFT)
end
return {2, resume(now, seq, srv, math.max(seq, tonumber(ARGV[5])), tonumber(ARGV[3]), tonumber(ARGV[4]), srv,
  tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(v[5]) or 0, 9)}
