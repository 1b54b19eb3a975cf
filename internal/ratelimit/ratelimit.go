// Package ratelimit keeps, inside one process, what the limits per client need locally: Window
// counts events per key in fixed windows (the instance's own count of failed admin
// authentications, used when the shared count in the store does not answer), and Refusals
// remember the keys a shared limit refused until its window ends, so that their next requests
// cost no round trip. The limits themselves are counted in the store, exact across instances
// (see docs/api.md, "Limits").
package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

const shards = 64

// Window counts per key in fixed windows aligned on the Unix epoch (a window of 10 s runs from
// :00 to :10, …). Memory: one entry per key seen in the current or last window; older entries
// are swept as the map grows. Safe for concurrent use.
type Window struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [shards]shard
}

type shard struct {
	mu      sync.Mutex
	m       map[string]entry
	sweepAt int
}

type entry struct {
	start int64 // window start, ms
	n     int64
}

// New returns an empty Window on the clock now (nil: time.Now).
func New(now func() time.Time) *Window {
	if now == nil {
		now = time.Now
	}
	w := &Window{now: now, seed: maphash.MakeSeed()}
	for i := range w.shards {
		w.shards[i].m = make(map[string]entry)
		w.shards[i].sweepAt = 1024
	}
	return w
}

// Count adds n (>= 0; 0 only reads) to key's count in the current window of length window
// and returns the count after it and the time until the window ends (the rule of
// store.Counters). A window <= 0 counts nothing.
func (w *Window) Count(key string, n int64, window time.Duration) (int64, time.Duration) {
	win := window.Milliseconds()
	if win <= 0 {
		return 0, 0
	}
	now := w.now().UnixMilli()
	start := now - now%win
	left := time.Duration(start+win-now) * time.Millisecond
	s := &w.shards[maphash.String(w.seed, key)%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e.start != start {
		e = entry{start: start}
	}
	if n <= 0 {
		return e.n, left
	}
	e.n += n
	s.m[key] = e
	if len(s.m) >= s.sweepAt {
		for k, old := range s.m {
			if old.start+2*win <= now { // from a window before the last
				delete(s.m, k)
			}
		}
		s.sweepAt = max(1024, 2*len(s.m))
	}
	return e.n, left
}
