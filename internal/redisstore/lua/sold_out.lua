-- sold_out.lua: marks an event sold out, or open for sale again. Selling out passes over every
-- waiting ticket at once (serving jumps to the last number; the range is recorded so those
-- tickets read SOLD_OUT for good, and their holders may join again once the sale reopens),
-- and from then on joins are refused and nobody is admitted.
-- KEYS: see common.lua.
-- ARGV[1] now (ms, 0 = Redis TIME), ARGV[2] 1 = sold out, 0 = on sale again
-- Returns {tickets passed over}, or {EVENT_NOT_FOUND} no such event.
local now = now_ms(ARGV[1])
local e = load_event()
if not e then return {EVENT_NOT_FOUND} end
if ARGV[2] == '0' then
  redis.call('HSET', K_EV, 'so', 0)
  return {0}
end
return {sell_out_line(e)}
