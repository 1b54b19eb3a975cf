-- pending.lua: the pending range a line keeps after its Redis lost data (resume.lua): numbers
-- pl..ph, at or below serving, that were admitted or waiting when the store lost them. They
-- are admitted in order, within the free slots, before anyone above serving, so a loss never
-- grants more than max_active sessions at once (the sessions admitted before it are among them:
-- their holders claim again).

-- admit_pending admits up to k of the pending range as one claimable batch, skipping tickets
-- that ended or left (marks) and void numbers — these only after the resume's grace (rg): a
-- holder who shows up by then takes its turn, one who shows up later is admitted at once
-- (ticket_status). Returns how many it admitted and the last place of the batch.
-- The range is places. Past the draw (places above dn) a place is its ticket's number. A place
-- of the draw (1..dn) holds a ticket whose number Lua cannot compute (no AES), so its marks are
-- not at hand: one that left is flagged by place instead, batx "x<place>" (leave.lua,
-- resume.lua), and void numbers are all above dn (a resume counts the draw's N handed out).
admit_pending = function(e, k, now) -- declared in common.lua
  if e.ph <= 0 or k <= 0 then return 0, 0 end
  local from, n, got = e.pl, e.pl, 0
  while n <= e.ph and got < k and n - from < 4096 do
    if n <= e.dn then
      if redis.call('HDEL', K_BATX, 'x' .. n) == 0 then got = got + 1 end
    elseif e.vd > 0 and redis.call('HEXISTS', K_BATX, 'v' .. n) == 1 then
      if now < e.rg then break end
    elseif mark(n) == 0 then
      got = got + 1
    end
    n = n + 1
  end
  if got > 0 then
    redis.call('ZADD', K_BAT, n - 1, from)
    redis.call('HSET', K_BATX, 'u' .. from, got, 'd' .. from, now + e.cttl, 'a' .. from, now)
    e.unc = redis.call('HINCRBY', K_EV, 'unc', got)
    redis.call('HINCRBY', K_EV, 'tot', got)
    redis.call('HINCRBY', K_EV, 'wcnt', got)
  end
  e.pl, e.pn = n, math.max(0, e.pn - got)
  if n > e.ph then
    e.pl, e.ph, e.pn = 0, 0, 0
  end
  redis.call('HSET', K_EV, 'pl', e.pl, 'ph', e.ph, 'pn', e.pn)
  return got, n - 1
end
