-- join.lua: a person joins the line; admitted at once when a slot and an admission are free,
-- the event is open and nobody waits ahead, else appended. Order = the per-event sequence.
-- KEYS: see common.lua, then KEYS[9] rl, KEYS[10] and KEYS[11] the two buckets of idempotency
-- keys (HASH key -> ticket number; keys.go), KEYS[12] rl1, KEYS[13] tpc; KEYS[9..13] may be
-- left out when ARGV[3..7] and ARGV[11] are (a join without a limit, an idempotency key or a
-- challenge reads only the line's 8).
-- ARGV[1] now (ms, 0 = Redis TIME)
-- ARGV[2] user key ('' = anonymous): the same user gets its live ticket back (created = 0)
-- ARGV[3] client key ('' or absent = not limited), ARGV[4] the limit L ('0' = no bucket: the
-- key is given for ARGV[11] only), ARGV[5] the window W (ms): a token bucket of L joins,
-- refilled at L per W (GCRA: a client may join at once L times, then once per W/L; at most
-- L + L * T / W joins in any span T). L * W < 2^52. Only a join that may take a new ticket is
-- counted (join_limit): one answered with its user's or its idempotency key's live ticket is
-- neither counted nor refused, and a retry that may only find its ticket (ARGV[7] '-') is
-- never counted.
-- KEYS[9], KEYS[12] the rl buckets (HASH client key -> its theoretical arrival time, TAT, in
-- 1/L ms since the start of the bucket's window; a TAT at or before now is no state at all):
-- windows of W aligned on the Unix epoch, even ones in KEYS[9], odd in KEYS[12]. The ev field
-- rlw names the current window and its limits ("<start>:<W>:<L>"); the other bucket holds the
-- window just before it or is empty (a TAT is at most one W ahead of its join, so one from two
-- windows back is past). Only touched with a client key; a bucket expires two windows after
-- its first write; a refused join writes nothing. New limits (W or L) start afresh.
-- ARGV[6] idempotency key ('' or absent = none): a retry of this join gets the ticket the first
--         made back while it is live (created = 0). Each bucket holds the keys of one epoch of
--         IDEM_MS (the ev fields ie0 and ie1 name the epoch each holds, so a re-created line
--         starts without any), so a key is remembered between one and two epochs.
-- ARGV[7] the single-use challenge the join carries, as "<end>:<id>": the end (ms) of the bucket
--         of used challenges that holds it and its id; '-' a retry that may only find its ticket;
--         '!' a join refused already (its proof failed), which only takes one from the client's
--         bucket and returns {COUNTED} (or RATE_LIMITED, EVENT_CLOSED, SOLD_OUT) without
--         touching the line; '' or absent none. KEYS[14] the bucket (HASH id -> 1, keys.go; only with a challenge): a
--         join that makes a ticket adds the id (HSETNX) and keeps the bucket until its end (at
--         least CHALLENGE_GRACE_MS; the ev field chb names the last bucket given its expiry, so
--         that is done once per bucket, not per join), or returns {CHALLENGE_USED} when the id
--         is there, taking no number; a join that finds a live ticket adds nothing, and one
--         answered {NEED_CEILING} takes it out (it is retried).
-- ARGV[8] ticket number, ARGV[9] its place, ARGV[10] the N it was computed for ('' or absent =
--         none): the place of the user's (or idempotency key's) ticket in a drawn pre-queue,
--         which Lua cannot compute. A call that gets NEED_PLACE or DRAW_LEFT is repeated with
--         them; the repeat is not counted again against the client's joins.
-- ARGV[11] the cap C of the client's (ARGV[3]) tickets in the pre-queue ('' or absent = none;
--         tickets_per_client). Before the line's opening (ev field opened not 1 and now < open),
--         a join that makes a ticket counts it in KEYS[13] tpc (HASH client key -> tickets made
--         before the opening, keys.go), in the same step as its number; the client's C+1st is
--         refused with {RATE_LIMITED, ms until the opening, 1}, giving back its number and its
--         challenge (it was counted against the bucket: it reached the line). A join answered
--         with a live ticket counts nothing. tpc expires a minute after the opening (the ev
--         field tpx names the opens_at its expiry was set for: once per opens_at, not per
--         join); from the opening on it is neither read nor written.
-- ARGV[12] '1': a join that may be admitted at once but only above the serving ceiling
--         (answered {NEED_CEILING, seq, serving, 1} before, and the caller reserved once) waits
--         in line instead of asking again: while other instances' joins take each reservation's
--         slots and free them again, asking again may never end ('' or absent: it asks).
-- Returns the ticket shape of common.lua, or {EVENT_NOT_FOUND} no such event, {EVENT_CLOSED} event closed,
-- {SOLD_OUT} sold out, {COUNTED} a refused join taken from the bucket (ARGV[7] '!'),
-- {RATE_LIMITED, ms until the client's next join} the client's bucket is empty
-- ({RATE_LIMITED, ms until the opening, 1}: its tickets of the pre-queue reached ARGV[11]),
-- {NEED_CEILING, seq, serving} the next number is above a durable ceiling (ev fields sc, vc):
-- the ceilings must reach at least seq + 1 and serving ({NEED_CEILING, seq, serving, 1}: only
-- to admit the join at once; see ARGV[12]), {CHALLENGE_USED} the challenge made a
-- ticket already (or a retry found none),
-- {NEED_PLACE, generation, N, seed hex, number} the live ticket to give back is in the draw:
-- call again with its place (ARGV[8..10]); {DRAW_LEFT, generation, N, seed hex} the user's ticket
-- is to be told its position but the draw's leavers are not scored by place yet: score them
-- (draw_left.lua) and call again (with ARGV[8] '0' so as not to count the join twice).
--
-- Every field read costs: the ev hash is a listpack (its few dozen fields are below
-- hash-max-listpack-entries), scanned from its start for each field (for an absent field, the
-- whole of it). The first HMGET reads gen, srv, rt, rate, close, so, opened and ph
-- (put_event.lua puts them first), and only what the arguments need: rlw with a client key,
-- ie0 and ie1 with an idempotency key, chb with a challenge. open and drw (and tpx with a cap of
-- tickets) are read by a second HMGET only while the opening is not settled (opened ~= 1), sc
-- by an HGET only at the first number of each run of SEQ_ALIGN. The cap of tickets costs a
-- join to a pre-queue one HINCRBY (a refused one two), nothing from the opening on.
-- The limit costs a join one more field in the first HMGET, an HGET (two when the client's
-- TAT is in the previous window's bucket; none in a batch whose last limited join was the same
-- client's) and an HSET (a new window: an UNLINK of the bucket of two windows back and a
-- PEXPIRE, once per window); a refused join returns before touching the line. Measured in
-- docs/api.md ("Limits").
--
-- The hot path comes first, before the helpers of common.lua (see "--@common" there): a new
-- ticket behind others, anonymous or of a user without a ticket, reads a few fields, takes the
-- next number and returns; so does a join to a pre-queue whose order is to be drawn (its place
-- is drawn at the opening: position 0, place 0). Only a join that may be admitted at once
-- (nobody ahead), of a user who holds a ticket, or the first step at or after opens_at of a
-- line not yet settled (settle_opening) loads the whole event.
--@hot-io
-- The hot path's reads and writes of the event's hash (KEYS[1]), its count of tickets that
-- left (KEYS[2]) and the limit's buckets (KEYS[9], KEYS[12]). The batched join (scripts.go)
-- puts versions in their place that keep what its joins read and wrote, so that a batch reads
-- each once (the event's until a join takes the cold path); join.lua on its own has each call
-- replaced by the redis.call below (inlineHotIO).
local function ev_read(...) return redis.call('HMGET', KEYS[1], ...) end
-- ev_hot, ev_hot_rl and ev_hot_ch are the first HMGET of a join without a limit, an
-- idempotency key or a challenge, of a counted join (rlw too), and of a counted join with a
-- challenge (rlw and chb). A batch gives its joins one table of each while none of them writes
-- a field: a table made per join costs Redis more than the reads.
local function ev_hot() return redis.call('HMGET', KEYS[1], 'gen', 'srv', 'rt', 'rate', 'close', 'so', 'opened', 'ph') end
local function ev_hot_rl() return redis.call('HMGET', KEYS[1], 'gen', 'srv', 'rt', 'rate', 'close', 'so', 'opened', 'ph', 'rlw') end
local function ev_hot_ch() return redis.call('HMGET', KEYS[1], 'gen', 'srv', 'rt', 'rate', 'close', 'so', 'opened', 'ph', 'rlw', 'chb') end
local function ev_write(f, x) redis.call('HSET', KEYS[1], f, x) end
local function left_count() return redis.call('ZCARD', KEYS[2]) end
-- ev_num is tonumber of a value ev_read gave (the batch keeps each value's number: strtod is as
-- dear as a field read).
local function ev_num(x) return tonumber(x) end
-- seq_add moves the line's last number (ev field seq) by d ('1' or '-1') and returns it. The
-- batch keeps it for its joins and writes it once (before a join's cold path, before a join
-- writes an entry naming its number, and at its end), so only the reply knows a number meanwhile.
local function seq_add(d) return redis.call('HINCRBY', KEYS[1], 'seq', d) end
-- seq_keep is called before a join writes its number anywhere but its reply (the batch writes
-- its copy of seq first, so that a number named in the store is never handed out again).
local function seq_keep() end
local function rl_get(k, f) return redis.call('HGET', k, f) end
local function rl_set(k, f, x) redis.call('HSET', k, f, x) end
local function rl_drop(k) redis.call('UNLINK', k) end
local function rl_expire(k, ms) redis.call('PEXPIRE', k, ms) end
-- The limit's window at now for the limit L (ARGV[4]) and window W (ARGV[5]): L and W as
-- numbers, the window's start (ms) and its tag (the ev field rlw). A batch computes it once for
-- the joins that share now, L and W.
local rl_window = function(now, l, w)
  local lim, win = tonumber(l), tonumber(w)
  local ws = now - now % win
  return lim, win, ws, ws .. ':' .. w .. ':' .. l
end
-- join_limit takes a join at now from the bucket of joins_per_client of client ckey, with the
-- limit L (l) and window W (w) and rlw the ev field read by the join: nil, or the refusal to
-- return. Only a join that may take a new ticket is counted: one that finds
-- its user's or its idempotency key's live ticket is answered with it whatever the bucket
-- holds (a retry after a timeout is not refused the ticket its first try made), one that
-- finds an ended ticket is counted on the cold path, before it takes its number, and a
-- retry that may only find its ticket (chal '-') is never counted.
local join_limit = function(now, rlw, ckey, l, w)
  local lim, win, ws, tag = rl_window(now, l, w)
  local span, at = win * lim, (now - ws) * lim -- a full bucket, and now, in 1/lim ms since ws
  local cur, old = KEYS[9], KEYS[12]
  if (ws / win) % 2 == 1 then cur, old = old, cur end
  local tat = nil
  local fresh = rlw ~= tag
  if fresh then
    if rlw ~= (ws - win) .. ':' .. w .. ':' .. l then rl_drop(old) end
    rl_drop(cur)
    ev_write('rlw', tag)
  else
    tat = tonumber(rl_get(cur, ckey))
  end
  if not tat then
    tat = tonumber(rl_get(old, ckey))
    if tat then tat = tat - span end
  end
  tat = math.max(tat or 0, at) + win
  if tat - at > span then
    if fresh then
      rl_set(cur, ckey, tat - win)
      rl_expire(cur, 2 * win)
    end
    return {RATE_LIMITED, math.ceil((tat - span - at) / lim)}
  end
  rl_set(cur, ckey, tat)
  if fresh then rl_expire(cur, 2 * win) end
end
--@hot-io-end
local now = now_ms(ARGV[1])
local ukey = ARGV[2]
local ckey, hint, ikey, chal = ARGV[3] or '', ARGV[8], ARGV[6] or '', ARGV[7] or ''
if hint then hint = hint ~= '' and tonumber(hint) or nil end
local tcap = ARGV[11]
-- (tonumber of '' is a strtod call too: a join without a cap makes none.)
tcap = ckey ~= '' and tcap and tcap ~= '' and tonumber(tcap) or nil
-- The first HMGET reads rlw, ie0/ie1 and chb only when the join needs them (at positions irl,
-- iie and iie + 1, ich of v).
local irl, iie, ich, v
if ckey == '' and ikey == '' and chal == '' then
  v = ev_hot()
elseif ikey == '' and chal == '' and ARGV[4] ~= '0' and not hint then
  -- A counted join, as an HTTP join is: rlw alone, without a table of names made first.
  irl = 9
  v = ev_hot_rl()
elseif ikey == '' and ckey ~= '' and ARGV[4] ~= '0' and not hint and chal ~= '-' and chal ~= '!' then
  -- A counted join with a challenge (a challenged event's HTTP join): rlw and chb.
  irl, ich = 9, 10
  v = ev_hot_ch()
else
  -- Made with room for the 4 fields that may be added (nf of them used), so that adding them
  -- does not rehash it.
  local f, nf = {'gen', 'srv', 'rt', 'rate', 'close', 'so', 'opened', 'ph', false, false, false, false}, 8
  if ckey ~= '' and ARGV[4] ~= '0' and not hint then nf = 9; f[9] = 'rlw'; irl = 9 end
  if ikey ~= '' then iie = nf + 1; f[iie], f[iie + 1] = 'ie0', 'ie1'; nf = nf + 2 end
  if chal ~= '' and chal ~= '-' and chal ~= '!' then nf = nf + 1; ich = nf; f[ich] = 'chb' end
  v = ev_read(unpack(f, 1, nf))
end
if not v[1] then return {EVENT_NOT_FOUND} end
-- (String tests first: tonumber is strtod, as dear as a field read.)
if v[5] and v[5] ~= '0' then
  local close = ev_num(v[5]) or 0
  if close > 0 and now >= close then return {EVENT_CLOSED} end
end
if v[6] and v[6] ~= '0' and tonumber(v[6]) == 1 then return {SOLD_OUT} end
-- hot: the line's opening is settled, or not due; pend: a pre-queue whose draw is pending;
-- popen: opens_at (ms) of a pre-queue whose joins count against the client's cap (ARGV[11]).
local hot, pend, popen, took = true, false, nil, nil
if v[7] ~= '1' then
  local o
  if tcap then o = redis.call('HMGET', KEYS[1], 'open', 'drw', 'tpx') else o = redis.call('HMGET', KEYS[1], 'open', 'drw') end
  local open = tonumber(o[1]) or 0
  if now >= open then
    hot = false
  else
    pend = o[2] == '1'
    if tcap then
      popen = open
      -- took counts a new ticket of the client, or counts nothing and returns false when the
      -- client has tcap already (a closure made only for a capped join to a pre-queue).
      took = function()
        if redis.call('HINCRBY', KEYS[13], ckey, '1') > tcap then
          redis.call('HINCRBY', KEYS[13], ckey, '-1')
          return false
        end
        if o[3] ~= o[1] then
          redis.call('PEXPIRE', KEYS[13], open - now + 60000)
          redis.call('HSET', KEYS[1], 'tpx', o[1])
          o[3] = o[1]
        end
        return true
      end
    end
  end
end
local prev = false
-- A named user's entries (common.lua, KEYS[7]): ufk its bucket of user key -> number, and per
-- number n the bucket urp .. (n div 128) of number -> user key.
local ufk, urp
if ukey ~= '' then
  local b1, b2 = string.byte(ukey, 1, 2)
  ufk = KEYS[7] .. ':' .. v[1] .. ':f' .. ((b1 * 256 + (b2 or 0)) % USER_BUCKETS)
  urp = KEYS[7] .. ':' .. v[1] .. ':r'
  prev = redis.call('HGET', ufk, ukey)
end
local byUser = prev and true or false
local ibucket = false
if iie then
  local ep = math.floor(now / IDEM_MS)
  local b = ep % 2
  local held = {v[iie + b], v[iie + 1 - b]} -- the epochs of this bucket and of the other one
  ibucket = KEYS[10 + b]
  if tonumber(held[1]) ~= ep then
    redis.call('DEL', ibucket)
    ev_write('ie' .. b, ep)
  elseif not prev then
    prev = redis.call('HGET', ibucket, ikey)
  end
  if not prev and tonumber(held[2]) == ep - 1 then prev = redis.call('HGET', KEYS[11 - b], ikey) end
end
local limited = false -- the join was counted (join_limit)
if irl and (not prev or chal == '!') and chal ~= '-' then
  local r = join_limit(now, v[irl], ckey, ARGV[4], ARGV[5])
  if r then return r end
  limited = true
end
if chal == '!' then return {COUNTED} end
local chid = nil
if not prev and chal == '-' then return {CHALLENGE_USED} end
if ich then
  local c = string.find(chal, ':', 1, true)
  chid, chal = string.sub(chal, c + 1), string.sub(chal, 1, c - 1)
end
local n, nleft, before
if not prev and hot then
  n = seq_add('1')
  if n % SEQ_ALIGN == 1 then
    -- The durable ceiling (docs/durability.md): the caller reserves more in SQL and retries.
    -- It is a multiple of SEQ_ALIGN (queue.SeqAlign), so only the first number of each run of
    -- SEQ_ALIGN can pass it.
    local sc = tonumber(redis.call('HGET', KEYS[1], 'sc')) or 0
    if sc > 0 and n > sc then
      seq_add('-1')
      return {NEED_CEILING, n - 1, tonumber(v[2])}
    end
  end
  if chid then
    if redis.call('HSETNX', KEYS[14], chid, '1') == 0 then
      seq_add('-1')
      return {CHALLENGE_USED}
    end
    if v[ich] ~= chal or ev_num(chal) <= now then
      redis.call('PEXPIRE', KEYS[14], math.max(tonumber(chal) - now, CHALLENGE_GRACE_MS))
      ev_write('chb', chal)
    end
  end
  if popen and not took() then
    seq_add('-1')
    if chid then redis.call('HDEL', KEYS[14], chid) end
    return {RATE_LIMITED, popen - now, 1}
  end
  nleft = left_count()
  if ukey ~= '' or ibucket then seq_keep() end
  if ukey ~= '' then
    redis.call('HSET', ufk, ukey, n)
    redis.call('HSET', urp .. math.floor(n / 128), n % 128, ukey)
  end
  if ibucket then redis.call('HSET', ibucket, ikey, n) end
  local srv = ev_num(v[2])
  before = n - 1 - srv - nleft
  if (before > 0 or pend) and (not v[8] or v[8] == '0') then
    -- eta_rate of common.lua, unformatted: rt when measured, else 0 (event.ETA).
    local rate = '0'
    if v[3] ~= '0' and (ev_num(v[3]) or 0) > 0 then rate = v[3] end
    if pend then return {1, n, 0, before + 1, srv, 0, rate, now, v[1], 1, 0} end
    return {1, n, before + 1, before + 1, srv, 0, rate, now, v[1], 1, n}
  end
end
--@common
local e = load_event()
settle_opening(e, now)
if n then before = before + pending(e) end
if prev then
  if e.drw == 2 then return draw_moved(e, DRAW_LEFT) end
  prev = tonumber(prev)
  local p = prev
  if prev <= e.seq and mark(prev) == 0 then -- else ticket_status reads no place
    local nArg
    if hint == prev then nArg = ARGV[10] end
    p = ticket_place(e, prev, nArg, ARGV[9])
    if not p then
      local r = draw_moved(e, NEED_PLACE)
      r[5] = prev
      return r
    end
  end
  local code, pos, u = ticket_status(e, prev, p, now)
  if code == 1 or code == 2 then
    local waiting = waiting_count(e)
    return reply(e, prev, code, pos, waiting, u, now, 0, p, ukey)
  end
end
if not n then -- no number taken yet: a user's ended ticket, or the hot path left the line to us
  if e.sc > 0 and e.seq >= e.sc then return {NEED_CEILING, e.seq, e.srv} end
  if irl and not limited and chal ~= '-' then
    local r = join_limit(now, v[irl], ckey, ARGV[4], ARGV[5])
    if r then return r end
  end
  if chal == '-' or (chid and redis.call('HSETNX', KEYS[14], chid, '1') == 0) then
    return {CHALLENGE_USED}
  end
  if popen and not took() then
    if chid then redis.call('HDEL', KEYS[14], chid) end
    return {RATE_LIMITED, popen - now, 1}
  end
  if chid and (v[ich] ~= chal or tonumber(chal) <= now) then
    redis.call('PEXPIRE', KEYS[14], math.max(tonumber(chal) - now, CHALLENGE_GRACE_MS))
    redis.call('HSET', K_EV, 'chb', chal)
  end
  nleft = redis.call('ZCARD', K_LEFT)
  before = e.seq - e.srv - nleft + pending(e)
  n = redis.call('HINCRBY', K_EV, 'seq', '1')
  e.seq = n
  if prev and byUser then redis.call('HDEL', urp .. math.floor(prev / 128), prev % 128) end
  if ukey ~= '' then
    redis.call('HSET', ufk, ukey, n)
    redis.call('HSET', urp .. math.floor(n / 128), n % 128, ukey)
  end
  if ibucket then redis.call('HSET', ibucket, ikey, n) end
end
if e.drw == 1 then return reply(e, n, 1, 0, before + 1, 0, now, 1, 0) end -- a place drawn at the opening
if before == 0 and is_open(e, now) and free_slots(e) > 0 and e.sc > 0 and n > e.vc and not prev
    and ARGV[12] ~= '1' then
  -- To be admitted at once it needs a higher serving ceiling: give the number back (it is the
  -- last one, nothing else has seen it) and let the caller reserve one and retry. The ceiling
  -- asked for covers every free slot: the joins behind this one are admitted at once too. A
  -- retry (ARGV[12] '1') asks no more: it waits in line, first, for the next admission step.
  redis.call('HINCRBY', K_EV, 'seq', '-1')
  if ukey ~= '' then
    redis.call('HDEL', ufk, ukey)
    redis.call('HDEL', urp .. math.floor(n / 128), n % 128)
  end
  if ibucket then redis.call('HDEL', ibucket, ikey) end
  if chid then redis.call('HDEL', KEYS[14], chid) end
  return {NEED_CEILING, n - 1, n - 1 + free_slots(e), 1}
end
if before == 0 and is_open(e, now) and free_slots(e) > 0 and (e.sc == 0 or n <= e.vc) then
  local ok = true
  if e.rate > 0 then
    refill(e, now)
    ok = e.tok + 1e-9 >= 1 -- a sum of fractions may fall a hair short of 1
    if ok then e.tok = e.tok - 1 end
  end
  if ok then
    if nleft > 0 then redis.call('DEL', K_LEFT) end
    e.srv = n
    redis.call('HSET', K_EV, 'srv', n, 'tok', e.tok, 'tokms', e.tokms)
    pace_count(e, redis.call('HINCRBY', K_EV, 'tot', '1'), 1)
    local u = start_session(e, n, now)
    local user
    if ukey ~= '' then user = ukey end
    return reply(e, n, 2, 0, 0, u, now, 1, n, user)
  end
end
return reply(e, n, 1, before + 1, before + 1, 0, now, 1, n)
