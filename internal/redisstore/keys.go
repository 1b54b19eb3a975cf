package redisstore

import (
	"slices"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/internal/store"
)

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
//	prefix{event}:users  the base name of the named users' buckets (userKeys)
//	prefix{event}:sold   ZSET   ranges of waiting tickets passed over by a sell-out
func (s *Store) keys(event string) []string {
	base := s.prefix + "{" + event + "}"
	return []string{base, base + ":left", base + ":marks", base + ":act", base + ":bat", base + ":batx", base + ":users", base + ":sold"}
}

// userBuckets is how many buckets a line's named users' entries (user key -> number) are
// spread over, by the user key's first two bytes: at 1,000,000 named users about 61 a bucket,
// under hash-max-listpack-entries (128 by default), so that each bucket stays a listpack.
const userBuckets = 16384

// userKeys returns the keys of the named users of event's line of generation gen whose last
// number is seq (lua/join.lua), under the event's hash tag; the scripts make their names from
// the users key (keys), so they are not passed as KEYS:
//
//	prefix{event}:users:<gen>:f<b>  HASH  user key -> ticket number, for the user keys whose
//	                                      first two bytes are b mod userBuckets
//	prefix{event}:users:<gen>:r<k>  HASH  n mod 128 -> user key, for the numbers n of
//	                                      128k..128k+127 (the reverse, for the usr claim)
//
// One hash of both cost ~153 bytes per named user (two hash-table entries); these buckets stay
// listpacks of ~20-byte entries. The generation in the names keeps a new line's users apart from
// whatever an old one left.
func (s *Store) userKeys(event string, gen uint32, seq int64) []string {
	base := s.prefix + "{" + event + "}:users:" + strconv.FormatUint(uint64(gen), 10)
	out := make([]string, 0, userBuckets+int(seq/128)+1)
	for b := range userBuckets {
		out = append(out, base+":f"+strconv.Itoa(b))
	}
	for k := int64(0); k <= seq/128; k++ {
		out = append(out, base+":r"+strconv.FormatInt(k, 10))
	}
	return out
}

// joinKeys returns the keys of a join: the line's, then, under the same hash tag {event} (see
// lua/join.lua):
//
//	prefix{event}:rl     HASH   client key -> its joins' theoretical arrival time, even windows
//	                            of joins_per_client (limits per client, see lua/join.lua)
//	prefix{event}:idem0  HASH   idempotency key (16-byte digest) -> ticket number, even epochs
//	prefix{event}:idem1  HASH   the same, odd epochs
//	prefix{event}:rl1    HASH   the same as rl, odd windows
//	prefix{event}:tpc    HASH   client key -> tickets it made before the line's opening
//	                            (tickets_per_client), until a minute after the opening
func (s *Store) joinKeys(event string) []string {
	if k, ok := s.joinKeyCache.Load(event); ok {
		return k.([]string)
	}
	base := s.prefix + "{" + event + "}"
	k := append(s.keys(event), base+":rl", base+":idem0", base+":idem1", base+":rl1", base+":tpc")
	if s.joinKeyCached.Load() < maxCachedEvents {
		if _, loaded := s.joinKeyCache.LoadOrStore(event, k); !loaded {
			s.joinKeyCached.Add(1)
		}
	}
	return k
}

// pollKey is the count of status reads per ticket of event (see lua/status.lua), under the
// same hash tag:
//
//	prefix{event}:polls  HASH   ticket number -> reads in the current window (polls_per_ticket)
func (s *Store) pollKey(event string) string { return s.prefix + "{" + event + "}:polls" }

// challengeKey is a bucket of used challenges (lua/join.lua), under the event's hash tag:
//
//	prefix{event}:ch:<b>  HASH  challenge id -> 1, for the challenges whose memory (expiry +
//	                            queue.ChallengeGrace) ends in minute b-1 (Unix minutes); it
//	                            expires at the start of minute b
//
// One hash per minute rather than a key per challenge: a used challenge costs a field, not a key
// and an entry of the expiry index, and a whole minute of them goes at once.
func (s *Store) challengeKey(event string, b int64) string {
	return s.prefix + "{" + event + "}:ch:" + strconv.FormatInt(b, 10)
}

// challengeBucketMS is the span of a bucket of used challenges (ms).
const challengeBucketMS = int64(time.Minute / time.Millisecond)

// saleKeys returns the keys of one event's sale, in the KEYS order every sale script expects
// (see lua/sale_common.lua): the line's keys first, then, under the same hash tag {event}:
//
//	prefix{event}:inv    HASH   inventory configuration and counters
//	prefix{event}:seats  SET    seat names (seated events)
//	prefix{event}:st     HASH   seat -> sold, or expiry:hold id while held
//	prefix{event}:holds  HASH   hold id -> owner|expiry|quantity|seats
//	prefix{event}:hexp   ZSET   hold ids scored by expiry (ms)
//	prefix{event}:th     HASH   gen:number -> the ticket's live hold id
//	prefix{event}:bk     HASH   booking id -> quantity (bookings recorded as sold)
func (s *Store) saleKeys(event string) []string {
	base := s.prefix + "{" + event + "}"
	return append(s.keys(event), base+":inv", base+":seats", base+":st", base+":holds", base+":hexp", base+":th", base+":bk")
}

// couponKeys returns the keys of one coupon campaign, in the KEYS order every coupon script
// expects (see lua/coupon_common.lua). The hash tag is the campaign id; the "cp:" before it
// keeps them apart from an event of the same id.
//
//	prefix cp:{campaign}        HASH   stock, opens (ms), seq, ceil, inc, admitted, rid (coupon_common.lua)
//	prefix cp:{campaign}:users  HASH   user key -> entry number
//	prefix cp:{campaign}:ent    HASH   entry number -> user id
//	prefix cp:{campaign}:q      ZSET   entries waiting to be taken (score = entry number)
//	prefix cp:{campaign}:proc   ZSET   entries taken by a worker, scored by lease expiry (ms)
//	prefix cp:{campaign}:res    HASH   entry number -> outcome: I<coupon code> or R
//	prefix cp:{campaign}:at     HASH   entry number -> when it was queued (ms), until recorded
func (s *Store) couponKeys(campaign string) []string {
	base := s.prefix + "cp:{" + campaign + "}"
	return []string{base, base + ":users", base + ":ent", base + ":q", base + ":proc", base + ":res", base + ":at"}
}

// Channel is the Pub/Sub channel of a notifier topic (tests subscribe to it directly):
//
//	prefix{event}:push   an event's push messages (sharded on a cluster: the event's slot)
//	prefix coupons:wake  wake-ups of the coupon issuance workers (campaign id)
func Channel(prefix string, t store.Topic) string {
	if t.Kind == store.TopicEvent {
		return prefix + "{" + t.Event + "}:push"
	}
	return prefix + "coupons:wake"
}

// leaseKey is the key of a named lease (STRING "until|holder", expiring): prefix lease:{name}.
func (s *Store) leaseKey(name string) string { return s.prefix + "lease:{" + name + "}" }

// histKey is the key of a history series (package history; the series name is the hash tag):
//
//	prefix hist:{series}     ZSET   samples: member "<at ms>|<data>", score at (ms)
//	prefix hist:{series}:n   HASH   the series' counters: name -> running total
func (s *Store) histKey(series string) string { return s.prefix + "hist:{" + series + "}" }

// fleetKeys are the keys of the instances' heartbeats (lua/beat.lua), under one hash tag:
//
//	prefix fleet:{instances}        ZSET   instance id, scored by when it stops counting as alive (ms)
//	prefix fleet:{instances}:info   HASH   instance id -> its info
func (s *Store) fleetKeys() []string {
	base := s.prefix + "fleet:{instances}"
	return []string{base, base + ":info"}
}

// JoinKeys returns the keys of a join.lua call that counts a client's joins (the line's 8 of
// Keys, then rl, idem0, idem1, rl1, tpc): the bench counts such a call's instructions.
func (s *Store) JoinKeys(event string) []string { return slices.Clone(s.joinKeys(event)) }
