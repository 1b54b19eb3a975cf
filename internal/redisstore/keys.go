package redisstore

// keys returns the keys of one event, in the KEYS order every script expects (see
// lua/common.lua). All share the hash tag {event} so that each script runs on one Redis
// Cluster slot; the prefix (default "wr:") lets tests and deployments share a Redis.
//
//	prefix{event}        HASH   configuration and counters
//	prefix{event}:left   ZSET   tickets above serving that left while waiting (score = number)
//	prefix{event}:marks  STRING bitfield, 2 bits per ticket number (live/left/ended/completed)
//	prefix{event}:act    ZSET   claimed admitted sessions, scored by expiry (ms)
//	prefix{event}:bat    ZSET   claimable admission batches: member first number, score last
//	prefix{event}:batx   HASH   per batch unclaimed count and claim deadline
//	prefix{event}:users  HASH   user key -> ticket number
//	prefix{event}:sold   ZSET   ranges of waiting tickets passed over by a sell-out
func (s *Store) keys(event string) []string {
	base := s.prefix + "{" + event + "}"
	return []string{base, base + ":left", base + ":marks", base + ":act", base + ":bat", base + ":batx", base + ":users", base + ":sold"}
}
