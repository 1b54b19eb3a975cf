-- coupon_common.lua: helpers prepended to every coupon script (see coupon.go).
--
-- Every coupon script receives the same keys, all under the campaign's hash tag {campaign}:
--   KEYS[1] camp   HASH   stock, opens (ms, 0 = open), seq (entries numbered), issued, rejected
--   KEYS[2] users  HASH   user key -> entry number
--   KEYS[3] ent    HASH   entry number -> user id
--   KEYS[4] q      ZSET   entries waiting to be taken (member = score = entry number)
--   KEYS[5] proc   ZSET   entries taken by a worker (score = lease expiry, ms)
--   KEYS[6] res    HASH   entry number -> outcome: 'I<coupon code>' issued, 'R' rejected
--   KEYS[7] at     HASH   entry number -> when it was queued (ms), until its outcome is recorded
--
-- Times come from now_ms (prelude.lua): Redis TIME unless ARGV[1] (a stubbed now, ms) is positive.
local K_CAMP, K_CUSERS, K_ENT, K_Q, K_PROC, K_RES, K_AT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]

