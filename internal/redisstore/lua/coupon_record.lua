-- coupon_record.lua: stores the outcomes of taken entries (first outcome wins) and ends their
-- leases. An outcome for an entry that is not its user's (the store lost data and the number
-- was restored to its owner, or dropped) is refused: nothing changes for it (coupon_restore.lua
-- ended that lease; a lease on the number now is its owner's).
-- KEYS: see coupon_common.lua.
-- ARGV[1] now (unused), ARGV[2..] triples: entry number, user id, outcome ('I<code>' or 'R')
-- Returns {refused entry number, ...}.
local refused = {}
for i = 2, #ARGV - 2, 3 do
  local m, uid, out = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local owner = redis.call('HGET', K_ENT, m)
  if owner == uid then
    redis.call('HSETNX', K_RES, m, out)
    redis.call('ZREM', K_PROC, m)
    redis.call('ZREM', K_Q, m)
    redis.call('HDEL', K_AT, m)
  else
    refused[#refused + 1] = tonumber(m)
  end
end
return refused
