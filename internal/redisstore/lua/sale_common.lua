-- sale_common.lua: helpers prepended (after common.lua) to every sale script (see sale.go).
--
-- A sale script receives the line's keys first (KEYS[1..8], see common.lua), so that it can
-- check and end admitted sessions and mark the line sold out in the same atomic step, then the
-- sale keys, all under the event's hash tag {event}:
--   KEYS[9]  inv    HASH   inventory: cap (units), mpb (max per booking), httl (hold TTL, ms),
--                          seated (1 = named seats), sig (configuration signature), sold,
--                          held (units in live or not yet swept holds), rdy (1 = sold state
--                          restored from the database)
--   KEYS[10] seats  SET    the seat names (seated events)
--   KEYS[11] st     HASH   seat -> 'S' (sold) or '<expiry ms>:<hold id>' (held); absent = available
--   KEYS[12] holds  HASH   hold id -> '<gen>:<number>|<expiry ms>|<quantity>|<seat>,<seat>,...'
--   KEYS[13] hexp   ZSET   hold ids scored by expiry (ms)
--   KEYS[14] th     HASH   '<gen>:<number>' -> the ticket's live hold id, 'b:<hold id>' ->
--                          the end (ms) of the booking grace of a hold being booked
--                          (book_begin.lua), so that a session ending keeps it that long, and
--                          'o:<hold id>' -> its expiry (ms) before its first booking attempt
--   KEYS[15] bk     HASH   booking id -> '<quantity>|<seat>,<seat>,...', every booking recorded
--                          as sold
local K_INV, K_SEATS, K_ST, K_HOLDS, K_HEXP, K_TH, K_BK =
  KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]

local INV_FIELDS = {'cap', 'mpb', 'httl', 'seated', 'sold', 'held', 'rdy'}

local function load_inv()
  local v = redis.call('HMGET', K_INV, unpack(INV_FIELDS))
  if not v[1] then return nil end
  local s = {}
  for i, f in ipairs(INV_FIELDS) do s[f] = tonumber(v[i]) or 0 end
  return s
end

local function split(str)
  local out = {}
  if not str or str == '' then return out end
  for part in string.gmatch(str, '([^,]+)') do out[#out + 1] = part end
  return out
end

-- parse_hold reads a holds value: owner, expiry ms, quantity, seats.
local function parse_hold(v)
  local owner, exp, qty, seats = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  return owner, tonumber(exp), tonumber(qty), split(seats)
end

-- ticket_hold reads hold id of the script's ticket (ARGV[2] line generation, ARGV[3] number):
-- its owner, expiry ms, quantity and seats, or nil and HOLD_NOT_FOUND or HOLD_NOT_YOURS.
local function ticket_hold(id)
  local v = redis.call('HGET', K_HOLDS, id)
  if not v then return nil, HOLD_NOT_FOUND end
  local owner, exp, qty, seats = parse_hold(v)
  if owner ~= ARGV[2] .. ':' .. ARGV[3] then return nil, HOLD_NOT_YOURS end
  return owner, exp, qty, seats
end

-- parse_state reads a held seat's state: expiry ms, hold id (nil, nil for a sold seat).
local function parse_state(v)
  if v == 'S' then return nil, nil end
  local exp, id = string.match(v, '^(%d+):(.*)$')
  return tonumber(exp), id
end

-- drop_hold removes hold id: its seats still held by it become available and held shrinks.
local function drop_hold(s, id)
  local v = redis.call('HGET', K_HOLDS, id)
  if not v then return end
  local owner, _, qty, seats = parse_hold(v)
  for _, seat in ipairs(seats) do
    local cur = redis.call('HGET', K_ST, seat)
    if cur then
      local _, hid = parse_state(cur)
      if hid == id then redis.call('HDEL', K_ST, seat) end
    end
  end
  s.held = redis.call('HINCRBY', K_INV, 'held', -qty)
  redis.call('HDEL', K_HOLDS, id)
  redis.call('ZREM', K_HEXP, id)
  if redis.call('HGET', K_TH, owner) == id then redis.call('HDEL', K_TH, owner) end
  redis.call('HDEL', K_TH, 'b:' .. id, 'o:' .. id)
end

-- release_hold frees hold id at once. A hold being booked is kept until its booking grace ends
-- (its expiry, and the one a failed booking would give back, o:<id>, are cut to it), since the
-- database may be confirming it right now: its units are not handed out meanwhile.
local function release_hold(s, id, now)
  local pin = tonumber(redis.call('HGET', K_TH, 'b:' .. id))
  if not pin or pin <= now then
    drop_hold(s, id)
    return
  end
  local orig = tonumber(redis.call('HGET', K_TH, 'o:' .. id))
  if orig and orig > pin then redis.call('HSET', K_TH, 'o:' .. id, pin) end
  local v = redis.call('HGET', K_HOLDS, id)
  if not v then return end
  local owner, exp, qty, seats = parse_hold(v)
  if exp <= pin then return end
  redis.call('HSET', K_HOLDS, id, owner .. '|' .. pin .. '|' .. qty .. '|' .. table.concat(seats, ','))
  redis.call('ZADD', K_HEXP, pin, id)
  for _, seat in ipairs(seats) do
    local cur = redis.call('HGET', K_ST, seat)
    if cur then
      local _, hid = parse_state(cur)
      if hid == id then redis.call('HSET', K_ST, seat, pin .. ':' .. id) end
    end
  end
end

-- release_ticket_hold frees the hold of ticket (gen, n): the ticket left or its session ended
-- (release_hold).
local function release_ticket_hold(gen, n, now)
  local id = redis.call('HGET', K_TH, gen .. ':' .. n)
  if not id then return end
  local s = load_inv()
  if not s then return end
  release_hold(s, id, now)
end

-- sweep drops at most limit holds whose time is up; it returns how many it dropped.
local function sweep(s, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K_HEXP, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(ids) do drop_hold(s, id) end
  return #ids
end

-- reopen_line puts the line back on sale for new joins.
local function reopen_line()
  if redis.call('EXISTS', K_EV) == 1 then redis.call('HSET', K_EV, 'so', 0) end
end

-- complete_ticket ends ticket (gen, n)'s session with a sale, whatever is left of it: the sale
-- is already confirmed in the database. A ticket that left stays left.
-- A ticket never claimed (waiting, or an admission not fetched) is left alone: a booking needs
-- a claimed session (hold.lua), so such a ticket has none.
local function complete_ticket(gen, n)
  local e = load_event()
  if not e or e.gen ~= gen or n < 1 or n > e.seq then return end
  local m = mark(n)
  if m == 1 or m == 3 then return end
  if redis.call('ZREM', K_ACT, n) == 0 and m == 0 then return end
  redis.call('HDEL', K_BATX, 'm' .. n)
  unpool(e, n)
  set_mark(n, 3)
end

-- counts is the reply of the scripts that change the sold state:
-- {0, capacity, sold, held, sold out (0/1), tickets passed over}
local function counts(s, passed)
  local so = 0
  if s.sold >= s.cap then so = 1 end
  return {0, s.cap, s.sold, s.held, so, passed or 0}
end
