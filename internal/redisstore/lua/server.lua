-- server.lua: the Redis server's identity, for the scripts that record which server a line or
-- a coupon campaign was last resumed on (resume.lua, coupon_check.lua, coupon_recover.lua).

-- server_id is the Redis server's run_id (INFO server): new at every start, and another on a
-- replica promoted by a failover. One INFO call: for rare scripts, never a hot path.
local function server_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
end
