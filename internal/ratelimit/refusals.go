package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

// Refusals remember, inside one process, keys that a shared limit refused and until when: a
// limit counted in the store for all instances (polls per ticket, failed admin
// authentications, push connections per client) refuses a key for the rest of its window
// once it is over, so this instance can answer the key's next requests itself, without a
// round trip, and still refuse nothing the store would have let through. Memory: one entry
// per key refused in the last window; older entries are swept as the map grows. Safe for
// concurrent use.
type Refusals struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [shards]refusalShard
}

type refusalShard struct {
	mu      sync.Mutex
	until   map[string]int64 // key -> end of the refusal, unix ms
	sweepAt int
}

// NewRefusals returns empty Refusals on the clock now (nil: time.Now).
func NewRefusals(now func() time.Time) *Refusals {
	if now == nil {
		now = time.Now
	}
	r := &Refusals{now: now, seed: maphash.MakeSeed()}
	for i := range r.shards {
		r.shards[i].until = make(map[string]int64)
		r.shards[i].sweepAt = 1024
	}
	return r
}

// Refuse remembers that key is refused for d from now (d <= 0: nothing).
func (r *Refusals) Refuse(key string, d time.Duration) {
	if d <= 0 {
		return
	}
	now := r.now().UnixMilli()
	s := &r.shards[maphash.String(r.seed, key)%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until[key] = max(s.until[key], now+d.Milliseconds())
	if len(s.until) >= s.sweepAt {
		for k, u := range s.until {
			if u <= now {
				delete(s.until, k)
			}
		}
		s.sweepAt = max(1024, 2*len(s.until))
	}
}

// Refused reports whether key is refused now, and for how much longer.
func (r *Refusals) Refused(key string) (time.Duration, bool) {
	s := &r.shards[maphash.String(r.seed, key)%shards]
	s.mu.Lock()
	u, ok := s.until[key]
	s.mu.Unlock()
	if !ok {
		return 0, false // (no clock read: this is every join's question)
	}
	now := r.now().UnixMilli()
	if u <= now {
		return 0, false
	}
	return time.Duration(u-now) * time.Millisecond, true
}
