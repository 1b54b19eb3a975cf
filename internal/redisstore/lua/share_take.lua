-- share_take.lua: takes one of a count that the instances hold together (store.Shares), when
-- the live shares of all holders add up to less than the limit.
-- KEYS[1] shares HASH: holder -> its count, 'x:' .. holder -> when its share lapses (ms); the
-- key itself expires with the last share (holder ids never start with "x:")
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] holder, ARGV[3] the holder's count before this
-- take (its share is set from it when it lapsed), ARGV[4] limit, ARGV[5] ttl (ms), ARGV[6] '1':
-- once (a holder holds at most one share, so the shares count distinct holders: a holder with a
-- live share is let through, its share living ttl more; ARGV[3] is ignored), else '0'
-- Returns {1} taken (or, once, held already), {0} the limit is reached.
--
-- Lapsed shares (a holder that died, or could not renew within the ttl) are not counted and
-- are dropped here. A key holds one share per instance: the loop is short.
local now = now_ms(ARGV[1])
local f = redis.call('HGETALL', KEYS[1])
local h = {}
for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
local me = ARGV[2]
local total, mine = 0, nil
for name, v in pairs(h) do
  if string.sub(name, 1, 2) ~= 'x:' then
    if (tonumber(h['x:' .. name]) or 0) > now then
      if name == me then mine = tonumber(v) end
      total = total + tonumber(v)
    else
      redis.call('HDEL', KEYS[1], name, 'x:' .. name)
    end
  end
end
local ttl = tonumber(ARGV[5])
local once = ARGV[6] == '1'
if once and mine ~= nil then
  redis.call('HSET', KEYS[1], 'x:' .. me, now + ttl)
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  return {1}
end
if mine == nil then
  mine = tonumber(ARGV[3])
  if once then mine = 0 end
  total = total + mine
end
if total >= tonumber(ARGV[4]) then return {0} end
redis.call('HSET', KEYS[1], me, mine + 1, 'x:' .. me, now + ttl)
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return {1}
