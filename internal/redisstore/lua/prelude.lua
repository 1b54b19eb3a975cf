-- prelude.lua: prepended to every script of the Redis store (see scripts.go), before its hot
-- path, after the result codes (Lua constants generated from scripts.go's table). Keep it to
-- what every script needs: each local function here is a closure made on every call.

-- now_ms returns the script's time in ms: ARGV[1] when positive (a stubbed clock, tests), else
-- Redis TIME, so that every instance shares the server's one clock.
local function now_ms(arg)
  local n = arg ~= '0' and tonumber(arg) -- '0', what the stores send, costs no strtod
  if n and n > 0 then return n end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
