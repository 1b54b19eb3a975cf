-- common.lua: helpers prepended to every script of the Redis store (see store.go).
--
-- Every script receives the same keys, all under the event's hash tag {event}:
--   KEYS[1] ev     HASH   configuration and counters (fields below)
--   KEYS[2] left   ZSET   tickets whose place is above serving that left while waiting
--                         (member = number, score = place; before the opening of a pending
--                         draw the score is the number too, see settle_opening)
--   KEYS[3] marks  STRING bitfield, u2 per ticket number: 0 live, 1 left, 2 ended, 3 completed
--   KEYS[4] act    ZSET   claimed admitted sessions (member = number, score = expiry, ms)
--   KEYS[5] bat    ZSET   claimable admission batches (member = first place, score = last place)
--   KEYS[6] batx   HASH   per batch: "u<lo>" unclaimed count, "d<lo>" claim deadline (ms),
--                         "a<lo>" admission time (ms); per admitted session: "m<n>" its
--                         absolute end, admission + session_max (ms); per void number
--                         (resume.lua) "v<n>" = 1 until its holder shows up; per drawn place
--                         of a resume's pending range whose ticket left, "x<place>" = 1
--                         (pending.lua); per session of a rolled-back copy not yet confirmed
--                         by its holder, "r<n>" = 1 (resume.lua, unpool)
--   KEYS[7] users  the base name of a named user's entries (join.lua; keys.go), one bucket
--                  per key, small enough to stay listpacks (hash-max-listpack-entries, 128 by
--                  default), each entry ~20 bytes instead of ~70 in one big hash:
--                  users:<gen>:f<b> HASH user key (16-byte digest) -> ticket number, where b is
--                  the key's first two bytes mod USER_BUCKETS; users:<gen>:r<n div 128> HASH
--                  n mod 128 -> user key (the reverse, for the admission token's usr claim)
--   KEYS[8] sold   ZSET   ranges of waiting tickets passed over by a sell-out (member = first
--                         place, score = last place): they read SOLD_OUT for good
--
-- Places (see package queue): the serving counter, batches, sell-out ranges and the scores of
-- left are places in line; marks, sessions (act, batx m<n>) and users are by ticket number.
-- A ticket's place is its number, but for the N tickets of a drawn pre-queue (numbers 1..dn),
-- whose places are the draw's permutation: AES is not at hand in Lua, so the Go side computes
-- them (redisstore's draw cache, from the seed and N this hash holds) and passes a ticket's
-- place with the N it was computed for; a script finding another N answers DRAW_MOVED.
--
-- ev fields: gen (line generation), max (max_active), rate (admit_rate /s), sttl, cttl (ms),
-- open, close (ms, 0 = unset), pause (1 = no admissions), ver (configuration version), so (1 = sold out), seq (last number given), srv (serving), tot (admitted total),
-- unc (unclaimed admissions), tok, tokms (token bucket), owe (admissions owed by late steps,
-- refill), rt (admissions/s moving average),
-- wst, wcnt (current rate window start ms and count), smax (session_max, ms; 0 = none),
-- rlw (join.lua's current window of the limit per client, "<start>:<W>:<L>"); the durable numbers (docs/durability.md):
-- sc, vc (ceilings of seq and srv reserved in SQL; sc 0 = no durable numbers: unbounded), vd (void numbers left to
-- reclaim: batx fields "v<n>"), rid (run_id of the server the line was last resumed on),
-- pl, ph, pn (the pending range after a loss, resume.lua: numbers pl..ph, at or below serving,
-- are admitted at once, 4,096 places a call; pn of them are present; ph 0 = none); the pool of
-- a resume (pending.lua): ptop (batches whose first place is at or below it are the pool's: the
-- old copy's and the pending range's), pu (their unclaimed admissions, not in unc), ru (sessions
-- of a rolled-back copy not yet confirmed, batx "r<n>"); pq (holders of void numbers the serving
-- counter passed who showed up with the room full, waiting for a slot ahead of the line: batx
-- "pql", their numbers in that order, each followed by a space; owe_queue, admit.lua);
-- pollw (start of status.lua's per-ticket window of polls, ms);
-- lw, ux (running totals: tickets that left while waiting, leave.lua; admissions that ended
-- unclaimed, admit.lua);
-- the opening (docs/draw.md): opened (1 once the opening is settled, see settle_opening), drw
-- (1 the pre-queue's draw is pending, 2 drawn but the Go side has still to record N in SQL or to
-- score by place the tickets that left before it), dn (N, the tickets drawn; absent: no draw),
-- seed (the draw's seed, hex; '' = arrival order).
--
-- Times come from now_ms (prelude.lua): Redis TIME unless ARGV[1] (a stubbed now, ms) is
-- positive, so that every instance shares one clock.
--
-- A script whose hot path needs none of these helpers may put that path first and a line
-- "--@common" after it: the store inserts this file there instead of at the top, so that a
-- call returning early does not define the helpers (each local function is a closure made
-- on every call: about a tenth of the cost of a join).
local K_EV, K_LEFT, K_MARKS, K_ACT, K_BAT, K_BATX, K_USERS, K_SOLD =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

-- admit_pending is defined by pending.lua, which every script that can reach ticket_status
-- includes after this file (declared here so that ticket_status sees it).
local admit_pending

-- load_event reads the ev hash, or returns nil when the event does not exist. The table is
-- made by one constructor, which sizes it once: filling it field by field in a loop rehashed
-- it five times per call and, with the loop, cost more than the HMGET itself.
local function load_event()
  local v = redis.call('HMGET', K_EV, 'gen', 'max', 'rate', 'sttl', 'cttl', 'open', 'close',
    'seq', 'srv', 'tot', 'unc', 'tok', 'tokms', 'rt', 'wst', 'wcnt', 'so', 'pause', 'smax',
    'sc', 'vc', 'vd', 'pl', 'ph', 'pn', 'opened', 'drw', 'dn', 'ru', 'ptop', 'pu', 'owe', 'pq')
  if not v[1] then return nil end
  return {gen = tonumber(v[1]) or 0, max = tonumber(v[2]) or 0, rate = tonumber(v[3]) or 0,
    sttl = tonumber(v[4]) or 0, cttl = tonumber(v[5]) or 0, open = tonumber(v[6]) or 0,
    close = tonumber(v[7]) or 0, seq = tonumber(v[8]) or 0, srv = tonumber(v[9]) or 0,
    tot = tonumber(v[10]) or 0, unc = tonumber(v[11]) or 0, tok = tonumber(v[12]) or 0,
    tokms = tonumber(v[13]) or 0, rt = tonumber(v[14]) or 0, wst = tonumber(v[15]) or 0,
    wcnt = tonumber(v[16]) or 0, so = tonumber(v[17]) or 0, pause = tonumber(v[18]) or 0,
    smax = tonumber(v[19]) or 0, sc = tonumber(v[20]) or 0, vc = tonumber(v[21]) or 0,
    vd = tonumber(v[22]) or 0, pl = tonumber(v[23]) or 0, ph = tonumber(v[24]) or 0,
    pn = tonumber(v[25]) or 0, opened = tonumber(v[26]) or 0, drw = tonumber(v[27]) or 0,
    dn = tonumber(v[28]) or 0, drawn = v[28] ~= false, ru = tonumber(v[29]) or 0,
    ptop = tonumber(v[30]) or 0, pu = tonumber(v[31]) or 0, owe = tonumber(v[32]) or 0,
    pq = tonumber(v[33]) or 0}
end

-- settle_opening is the line's opening, made once by its first step at or after opens_at
-- (every script calls it after load_event; join.lua's and status.lua's hot paths leave a line
-- not settled to their common path). With a pending draw (drw 1) the N = seq tickets that
-- joined before it are drawn: dn = N, their places are the permutation's. drw becomes 2 until
-- the Go side has recorded N with the line's durable numbers in SQL (sc > 0: so that a line
-- resumed after a loss keeps its draw, resume.lua) and scored by place those of them that left
-- before the opening (in left scored by number; draw_left.lua): nobody is told a drawn position
-- or admitted meanwhile (status.lua, admit.lua).
local function settle_opening(e, now)
  if e.opened == 1 or now < e.open then return end
  e.opened = 1
  if e.drw == 1 and e.srv == 0 then
    e.dn, e.drawn, e.drw = e.seq, true, 0
    if e.seq > 0 and (e.sc > 0 or redis.call('ZCARD', K_LEFT) > 0) then e.drw = 2 end
    redis.call('HSET', K_EV, 'opened', 1, 'dn', e.dn, 'drw', e.drw)
  else
    e.drw = 0
    redis.call('HSET', K_EV, 'opened', 1, 'drw', 0)
  end
end

-- ticket_place returns ticket n's place: its number outside the draw, 0 while the draw is
-- pending, the caller's place p when the caller computed it for the draw's N (nArg), else nil
-- (the caller's N is stale: answer draw_moved).
local function ticket_place(e, n, nArg, pArg)
  if e.drw == 1 then return 0 end
  if n < 1 or n > e.dn then return n end
  if tonumber(nArg) ~= e.dn then return nil end
  return tonumber(pArg)
end

-- draw_moved is the reply to a caller whose N is stale: {DRAW_MOVED, generation, N, seed hex};
-- draw_left (code DRAW_LEFT, same values) asks the caller to score the draw's leavers by place
-- first (drw 2: positions would count them wrong meanwhile).
local function draw_moved(e, code)
  return {code or DRAW_MOVED, e.gen, e.dn, redis.call('HGET', K_EV, 'seed') or ''}
end

-- is_open: admissions may happen (opened, and not paused by the operator).
local function is_open(e, now) return e.pause ~= 1 and (e.open == 0 or now >= e.open) end
local function is_closed(e, now) return e.close > 0 and now >= e.close end

local function mark(n)
  return redis.call('BITFIELD', K_MARKS, 'GET', 'u2', '#' .. n)[1]
end

local function set_mark(n, m)
  redis.call('BITFIELD', K_MARKS, 'SET', 'u2', '#' .. n, m)
end

-- ticket_of is the prelude of a script that acts on one ticket (leave.lua, complete.lua): the
-- line, settled, and the ticket of ARGV[2] (line generation) and ARGV[3] (number), its mark and
-- its place (ARGV[4] N and ARGV[5] the place in the draw of N, see ticket_place). It returns
-- e, n, m, p, or nil and the reply to give instead: {EVENT_NOT_FOUND}, {TICKET_NOT_FOUND} (not
-- a number of this generation's), or draw_moved. A ticket that left (mark 1), or whose mark is
-- settled (the caller's final mark, complete.lua's 3), is returned without its place, for the
-- caller to answer.
local function ticket_of(now, settled)
  local e = load_event()
  if not e then return nil, {EVENT_NOT_FOUND} end
  if e.gen ~= tonumber(ARGV[2]) then return nil, {TICKET_NOT_FOUND} end
  settle_opening(e, now)
  local n = tonumber(ARGV[3])
  if n < 1 or n > e.seq then return nil, {TICKET_NOT_FOUND} end
  local m = mark(n)
  if m == 1 or m == settled then return e, n, m, nil end
  local p = ticket_place(e, n, ARGV[4], ARGV[5])
  if not p then return nil, draw_moved(e) end
  return e, n, m, p
end

-- counted_active is how many admissions count against max_active: claimed sessions and
-- unclaimed admissions, and after a resume (pending.lua) the pool — the sessions of a
-- rolled-back copy not yet confirmed (ru) and the pool's unclaimed admissions (pu) — within
-- what the others leave of max_active. Some of the pool ended before the loss (the store cannot
-- tell which); those that did not, with the others, were within max_active before it, so the
-- pool counts no more than is left, and every holder of it can still come back.
local function counted_active(e)
  local act = redis.call('ZCARD', K_ACT)
  if e.ru == 0 and e.pu == 0 then return act + e.unc end
  local real = act - e.ru + e.unc
  return real + math.min(e.ru + e.pu, math.max(0, e.max - real))
end

local function free_slots(e)
  return e.max - counted_active(e)
end

-- unpool takes session n out of the pool of a rolled-back copy (resume.lua) when its holder
-- shows up or the session ends.
local function unpool(e, n)
  if e.ru > 0 and redis.call('HDEL', K_BATX, 'r' .. n) == 1 then
    e.ru = redis.call('HINCRBY', K_EV, 'ru', -1)
  end
end

-- pending is how many of the pending range (resume.lua) still wait: they are ahead of everyone
-- above serving.
local function pending(e)
  if e.ph > 0 then return e.pn + e.pq end
  return e.pq
end

-- start_session admits n for a holder who is here: a session of sttl from now, never past
-- session_max (batx m<n>). Returns its end (ms).
local function start_session(e, n, now)
  local u = now + e.sttl
  if e.smax > 0 then
    local fin = now + e.smax
    if fin < u then u = fin end
    redis.call('HSET', K_BATX, 'm' .. n, fin)
  end
  redis.call('ZADD', K_ACT, u, n)
  return u
end

-- owe_queue puts void number n, passed by the serving counter, in the queue of those owed an
-- admission (pq, batx pql) unless it is there, and returns its position in it (1 = next).
local function owe_queue(e, n)
  local list = redis.call('HGET', K_BATX, 'pql') or ''
  local i, s = 0, tostring(n)
  for x in string.gmatch(list, '%d+') do
    i = i + 1
    if x == s then return i end
  end
  redis.call('HSET', K_BATX, 'pql', list .. s .. ' ')
  e.pq = redis.call('HINCRBY', K_EV, 'pq', 1)
  return e.pq
end

-- waiting_count is how many tickets wait: above serving and present, plus the pending ones.
local function waiting_count(e)
  return e.seq - e.srv - redis.call('ZCARD', K_LEFT) + pending(e)
end

-- bucket_size is the admit_rate bucket's capacity: a tenth of a second's admissions (one
-- admission step's worth) and just under one more, so that the fraction of a token a step
-- cannot use (always under one) is carried to the next instead of spilling (a bucket of exactly
-- floor(rate / 10) admitted 10/s at 15/s: issue 21), while a step still admits at most
-- rate / 10 when that is whole. While the steps come on time (queue.AdmitStep), no one-second
-- window admits more than 1.1 x admit_rate + 1; over any span the admissions are admit_rate x
-- the span, within one bucket (and what refill lets a late step make up). memstore's
-- bucketSize is the same.
local function bucket_size(rate) return math.max(1, rate / 10 + 1 - 1e-6) end

-- refill adds to the bucket (tok) what accrued since its last step (tokms), up to bucket_size.
-- With late (a step of the admission processor), what overflows the bucket because this step
-- came more than STEP_MS after the last one (every instance's steps starved of CPU, or the
-- store slow) is owed (owe), up to LATE_MS of admit_rate (queue.AdmitLateMax): a late step
-- may take it too (step_tokens), and so makes up what the steps it replaced would have taken.
local function refill(e, now, late)
  local size = bucket_size(e.rate)
  local el = now - e.tokms
  if el > 0 then
    e.tok = e.tok + el * e.rate / 1000
    e.tokms = now
  end
  if e.tok > size then
    if late and el > STEP_MS then
      local over = math.min(e.tok - size, (el - STEP_MS) * e.rate / 1000)
      e.owe = math.min(e.owe + over, LATE_MS * e.rate / 1000)
    end
    e.tok = size
  end
end

-- step_tokens takes a step's k admissions from the bucket, then from what is owed. A step
-- that admitted everyone it could (spare: no other free slot, nobody else waiting, or the line
-- shut) leaves nothing owed: time when nobody else could be admitted is never made up. One
-- cut short (by the tokens, a batch cap or the serving ceiling) keeps in the bucket what the
-- next step's refill has room for (the fraction of a token a step cannot use, bucket_size) and
-- owes the rest, up to LATE_MS of admit_rate.
local function step_tokens(e, k, spare)
  e.tok = e.tok - k
  if e.tok < 0 then e.owe, e.tok = e.owe + e.tok, 0 end
  if spare then
    e.owe = 0
    return
  end
  local keep = math.max(0, bucket_size(e.rate) - e.rate * STEP_MS / 1000)
  if e.tok > keep then e.owe, e.tok = math.min(e.owe + e.tok - keep, LATE_MS * e.rate / 1000), keep end
end

-- pace_count counts k admissions that made the line's admitted total tot into the window of
-- the admission rate ETAs read (wcnt; admit.lua folds it into rt every second), but for those
-- among the line's first max_active: they fill an empty room, all at once at an opening, and
-- tell nothing of the pace at which people get in once it is full, when a slot frees only as a
-- session ends. Counted, a room of 2 filled at once read 2 admissions a second for the ticket
-- behind, an ETA of 2 s where the session TTL (300 s) bounds it (helper-82), and the EMA took
-- ~15 s to forget it. Not counted, the rate is unmeasured until the room turns over (eta_rate
-- answers 0), and an ETA fills the free slots at admit_rate, then waits for the full house's
-- turnover (event.ETA).
local function pace_count(e, tot, k)
  local c = tot - math.max(e.max, tot - k)
  if c > 0 then redis.call('HINCRBY', K_EV, 'wcnt', c) end
end

local function eta_rate(e)
  if e.rt > 0 then return string.format('%.3f', e.rt) end
  return '0'
end

-- batch_of returns the first place, claim deadline and admission time (ms; nil for a batch
-- admitted before it was kept) of the claimable batch holding place n.
local function batch_of(n)
  local r = redis.call('ZRANGEBYSCORE', K_BAT, n, '+inf', 'LIMIT', 0, 1)
  if #r == 0 or tonumber(r[1]) > n then return nil end
  local v = redis.call('HMGET', K_BATX, 'd' .. r[1], 'a' .. r[1])
  return r[1], tonumber(v[1]), tonumber(v[2])
end

-- release takes one unclaimed admission out of batch lo (the pool's at or below ptop).
local function release(e, lo)
  local u = redis.call('HINCRBY', K_BATX, 'u' .. lo, -1)
  if tonumber(lo) <= e.ptop then
    e.pu = redis.call('HINCRBY', K_EV, 'pu', -1)
  else
    e.unc = redis.call('HINCRBY', K_EV, 'unc', -1)
  end
  if u <= 0 then
    redis.call('ZREM', K_BAT, lo)
    redis.call('HDEL', K_BATX, 'u' .. lo, 'd' .. lo, 'a' .. lo)
  end
end

-- ticket_status reads ticket n, at place p (ticket_place; 0: the draw is pending), and counts
-- as its activity (claims a claimable admission, extends a live session). Returns status code
-- [, position, admitted_until_ms]; codes:
-- 1 QUEUED, 2 ADMITTED, 3 EXPIRED, 4 CLOSED, 5 SOLD_OUT, 6 COMPLETED, or TICKET_NOT_FOUND. After
-- EXPIRED, a fourth value true says that this call ended the session (its hold is to go).
local function ticket_status(e, n, p, now)
  if n < 1 or n > e.seq then return TICKET_NOT_FOUND end
  local m = mark(n)
  if m == 1 then return TICKET_NOT_FOUND end
  if m == 2 then return 3 end
  if m == 3 then return 6 end
  local placed = p > 0 and p <= e.srv -- reached by the serving counter
  if e.vd > 0 and redis.call('HEXISTS', K_BATX, 'v' .. n) == 1 then
    -- A void number (resume.lua) whose holder shows up: the ticket was handed out before the
    -- store lost it. It keeps its number; the void ones ahead were skipped, so it moved forward.
    if placed and e.ph > 0 and p >= e.pl and p <= e.ph then
      -- In the part of a pending range not admitted yet (past the first 4,096 places): present
      -- now, it is admitted with the rest of the range at once (pending.lua).
      redis.call('HDEL', K_BATX, 'v' .. n)
      if n <= e.dn then redis.call('HDEL', K_BATX, 'x' .. p) end -- a void place of the draw
      e.vd = redis.call('HINCRBY', K_EV, 'vd', -1)
      e.pn = redis.call('HINCRBY', K_EV, 'pn', 1)
      if is_open(e, now) then admit_pending(e, now) end
    elseif placed then
      -- Serving passed it while it was void: it is owed the admission, at once when a slot is
      -- free and nobody else is owed one first, else by the next steps, ahead of the line and
      -- in the order they showed up (owe_queue, admit.lua), never above max_active (helper-84:
      -- 228 sessions at max_active 5 when each was admitted at once).
      if not is_open(e, now) then return 1, 1 end
      if e.so == 1 then return 5 end -- nobody is admitted once sold out (sell_out_line)
      if e.pq > 0 or free_slots(e) <= 0 then
        if is_closed(e, now) then return 4 end
        return 1, owe_queue(e, n)
      end
      redis.call('HDEL', K_BATX, 'v' .. n)
      e.vd = redis.call('HINCRBY', K_EV, 'vd', -1)
      local u = start_session(e, n, now)
      redis.call('HINCRBY', K_EV, 'tot', 1)
      return 2, 0, u
    else
      redis.call('HDEL', K_BATX, 'v' .. n)
      redis.call('ZREM', K_LEFT, n)
      e.vd = redis.call('HINCRBY', K_EV, 'vd', -1)
    end
  end
  if not placed then
    if is_closed(e, now) then return 4 end
    if p == 0 then return 1, 0 end
    return 1, p - e.srv - redis.call('ZCOUNT', K_LEFT, '-inf', '(' .. p) + pending(e)
  end
  if e.ph > 0 and p >= e.pl and p <= e.ph then
    -- In the part of a pending range not admitted yet (past the first 4,096 places: the next
    -- admission step admits it; at most this many are ahead).
    if is_closed(e, now) then return 4 end
    return 1, math.max(1, math.min(p - e.pl + 1, e.pn))
  end
  local exp = redis.call('ZSCORE', K_ACT, n)
  local fin = 0 -- the session's absolute end (session_max), 0 = none
  if exp then
    unpool(e, n) -- its holder is here (or it ended)
    if tonumber(exp) <= now then
      redis.call('ZREM', K_ACT, n)
      redis.call('HDEL', K_BATX, 'm' .. n)
      set_mark(n, 2)
      return 3, 0, 0, true
    end
    if e.smax > 0 then
      fin = tonumber(redis.call('HGET', K_BATX, 'm' .. n))
      if not fin then -- a session begun before session_max was set: it runs from now
        fin = now + e.smax
        redis.call('HSET', K_BATX, 'm' .. n, fin)
      end
    end
  else
    local lo, deadline, adm = batch_of(p)
    if not lo or deadline <= now then
      local r = redis.call('ZRANGEBYSCORE', K_SOLD, p, '+inf', 'LIMIT', 0, 1)
      if #r > 0 and tonumber(r[1]) <= p then return 5 end
      return 3
    end
    release(e, lo)
    if e.smax > 0 then
      fin = (adm or (deadline - e.cttl)) + e.smax
      if fin <= now then
        set_mark(n, 2)
        return 3
      end
      redis.call('HSET', K_BATX, 'm' .. n, fin)
    end
  end
  -- Activity renews the session for sttl from now, never shortening an extension (extend.lua).
  local u = now + e.sttl
  if exp and tonumber(exp) > u then u = tonumber(exp) end
  if fin > 0 and fin < u then u = fin end
  redis.call('ZADD', K_ACT, u, n)
  return 2, 0, u
end

-- reply is the ticket shape every ticket script returns:
-- {code, number, position, waiting, serving, admitted_until_ms, rate, now_ms, generation, created,
--  place [, user key]} (the user key of an admitted ticket of a named user)
local function reply(e, n, code, pos, waiting, u, now, created, place, user)
  return {code, n, pos or 0, waiting, e.srv, u or 0, eta_rate(e), now, e.gen, created, place, user}
end

-- sell_out_line marks the line sold out (sold_out.lua, and a sale selling its last unit):
-- every waiting ticket is passed over at once (serving jumps to the last place, seq: the places
-- are 1..seq; the range is recorded so those tickets read SOLD_OUT). A pending draw is called
-- off: nobody waits for the opening. e is load_event()'s result (nil: no line). It returns how
-- many were waiting.
local function sell_out_line(e)
  if not e or e.so == 1 then return 0 end
  if e.drw == 1 then redis.call('HSET', K_EV, 'drw', 0) end
  local passed = waiting_count(e)
  if e.ph > 0 then
    -- The pending range reads SOLD_OUT too.
    redis.call('ZADD', K_SOLD, e.ph, e.pl)
    redis.call('HSET', K_EV, 'pl', 0, 'ph', 0, 'pn', 0)
  end
  if e.seq > e.srv then
    redis.call('ZADD', K_SOLD, e.seq, e.srv + 1)
    redis.call('DEL', K_LEFT)
  end
  if e.pq > 0 then redis.call('HSET', K_BATX, 'pql', '') end -- those owed read SOLD_OUT (ticket_status)
  redis.call('HSET', K_EV, 'so', 1, 'srv', e.seq, 'pq', 0)
  return passed
end
