-- pending.lua: the pending range a line keeps after its Redis lost data (resume.lua): places
-- pl..ph, at or below serving, whose tickets the serving counter had passed when the store lost
-- them. Every one of them may have been told it was admitted (the serving ceiling in SQL is
-- raised to exactly what an admission step admits, before it admits: admit.lua), so they are
-- all admitted at once, into the resume's pool (ptop, pu in common.lua): a holder who was told
-- keeps going and one who was not is admitted a little early, and nobody after them is admitted
-- before them. The pool counts against max_active only as far as the others leave room
-- (counted_active), so a loss never grants more than max_active sessions as the line counts
-- them.

-- admit_pending admits the pending range at once as claimable batches of the pool (4,096
-- places a call: the admission step admits the rest), skipping tickets that ended or left
-- (marks) and void numbers (a void number's holder who shows up later is admitted at once,
-- ticket_status). Returns how many it admitted and the last place of the batch.
-- The range is places. Past the draw (places above dn) a place is its ticket's number. A place
-- of the draw (1..dn) holds a ticket whose number Lua cannot compute (no AES), so its marks are
-- not at hand: one that left is flagged by place instead, batx "x<place>" (leave.lua,
-- resume.lua); so is a void number of the draw (resume.lua: its place came from the Go side),
-- until its holder shows up (ticket_status). Other void numbers are all above dn.
admit_pending = function(e, now) -- declared in common.lua
  if e.ph <= 0 then return 0, 0 end
  local from, n, got = e.pl, e.pl, 0
  while n <= e.ph and n - from < 4096 do
    if n <= e.dn then
      if redis.call('HDEL', K_BATX, 'x' .. n) == 0 then got = got + 1 end
    elseif e.vd > 0 and redis.call('HEXISTS', K_BATX, 'v' .. n) == 1 then
      -- void: skipped
    elseif mark(n) == 0 then
      got = got + 1
    end
    n = n + 1
  end
  if got > 0 then
    redis.call('ZADD', K_BAT, n - 1, from)
    redis.call('HSET', K_BATX, 'u' .. from, got, 'd' .. from, now + e.cttl, 'a' .. from, now)
    e.pu = redis.call('HINCRBY', K_EV, 'pu', got) -- its first place is at or below ptop (resume.lua)
    pace_count(e, redis.call('HINCRBY', K_EV, 'tot', got), got)
  end
  e.pl, e.pn = n, math.max(0, e.pn - got)
  if n > e.ph then
    e.pl, e.ph, e.pn = 0, 0, 0
  end
  redis.call('HSET', K_EV, 'pl', e.pl, 'ph', e.ph, 'pn', e.pn)
  return got, n - 1
end
