-- hold.lua: reserves seats (or a quantity of general-admission units) for an admitted ticket,
-- all or nothing, replacing the ticket's previous hold in the same step (a refused hold leaves
-- the previous one in place). The ticket's admitted session must be live (claimed, in the
-- line's act set with an expiry after now); the hold counts as its activity.
-- KEYS: see common.lua and sale_common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] line generation, ARGV[3] ticket number,
-- ARGV[4] new hold id, ARGV[5] quantity, ARGV[6..] seats (sorted, none for a quantity)
-- Returns {0, hold expiry ms}, or {NO_INVENTORY} no inventory, {NOT_READY} not ready, {TICKET_NOT_FOUND} no such ticket,
-- {NOT_ADMITTED} no live admission, {SOLD_OUT} sold out, {TOO_MANY, max per booking} too many,
-- {UNKNOWN_SEATS, seat...} unknown seats, {WRONG_KIND} seats on a general-admission event or a quantity on a
-- seated one, {CONFLICT, available, seat...} conflict.
local now = now_ms(ARGV[1])
local s = load_inv()
if not s then return {NO_INVENTORY} end
if s.rdy ~= 1 then return {NOT_READY} end
local gen, n, id, qty = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local e = load_event()
if not e then return {NOT_ADMITTED} end
if e.gen ~= gen then return {TICKET_NOT_FOUND} end
local sexp = redis.call('ZSCORE', K_ACT, n)
if not sexp or tonumber(sexp) <= now then return {NOT_ADMITTED} end
if s.sold >= s.cap then return {SOLD_OUT} end
local nseats = #ARGV - 5
if (s.seated == 1) ~= (nseats > 0) then return {WRONG_KIND} end
if qty > s.mpb then return {TOO_MANY, s.mpb} end
sweep(s, now, 100)
local owner = gen .. ':' .. n
local prev = redis.call('HGET', K_TH, owner)
if s.seated == 1 then
  local unknown = {}
  for i = 6, #ARGV do
    if redis.call('SISMEMBER', K_SEATS, ARGV[i]) == 0 then unknown[#unknown + 1] = ARGV[i] end
  end
  if #unknown > 0 then return {UNKNOWN_SEATS, unpack(unknown)} end
  local conflicts = {}
  for i = 6, #ARGV do
    local cur = redis.call('HGET', K_ST, ARGV[i])
    if cur then
      local hexp, hid = parse_state(cur)
      if not hid or (hid ~= prev and hexp > now) then conflicts[#conflicts + 1] = ARGV[i] end
    end
  end
  if #conflicts > 0 then
    return {CONFLICT, math.max(0, s.cap - s.sold - s.held), unpack(conflicts)}
  end
  if prev then drop_hold(s, prev) end
  for i = 6, #ARGV do
    local cur = redis.call('HGET', K_ST, ARGV[i])
    if cur then -- an expired hold of someone else, not yet swept
      local _, hid = parse_state(cur)
      drop_hold(s, hid)
    end
  end
else
  local mine = 0
  if prev then
    local v = redis.call('HGET', K_HOLDS, prev)
    if v then
      local _, _, pq = parse_hold(v)
      mine = pq
    end
  end
  local avail = s.cap - s.sold - s.held + mine
  if qty > avail then return {CONFLICT, math.max(0, avail)} end
  if prev then drop_hold(s, prev) end
end
local hexp = now + s.httl
local list = {}
for i = 6, #ARGV do
  redis.call('HSET', K_ST, ARGV[i], hexp .. ':' .. id)
  list[#list + 1] = ARGV[i]
end
redis.call('HSET', K_HOLDS, id, owner .. '|' .. hexp .. '|' .. qty .. '|' .. table.concat(list, ','))
redis.call('ZADD', K_HEXP, hexp, id)
redis.call('HSET', K_TH, owner, id)
redis.call('HINCRBY', K_INV, 'held', qty)
local u = now + e.sttl
if e.smax > 0 then
  local fin = tonumber(redis.call('HGET', K_BATX, 'm' .. n))
  if fin and fin < u then u = fin end
end
if u > tonumber(sexp) then redis.call('ZADD', K_ACT, u, n) end
return {0, hexp}
