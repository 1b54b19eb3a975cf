// Package ratelimit counts events per key in fixed windows inside one process: the limits
// that need not hold across instances (status polls per ticket, admin authentication failures
// per client; see docs/api.md, "Limits"). The joins per client, which must hold across
// instances, are counted by the line store itself (queue.JoinParams).
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

// Allow counts one event of key in the current window of length window and reports whether it
// is within limit; when it is not, retry is the time until the window ends. An event refused
// is not counted. A limit or window <= 0 allows everything.
func (w *Window) Allow(key string, limit int64, window time.Duration) (ok bool, retry time.Duration) {
	return w.add(key, limit, window, 1)
}

// Exceeded reports whether key has reached limit in the current window, without counting.
func (w *Window) Exceeded(key string, limit int64, window time.Duration) (bool, time.Duration) {
	ok, retry := w.add(key, limit, window, 0)
	return !ok, retry
}

func (w *Window) add(key string, limit int64, window time.Duration, inc int64) (bool, time.Duration) {
	if limit <= 0 || window <= 0 {
		return true, 0
	}
	now := w.now().UnixMilli()
	win := window.Milliseconds()
	if win <= 0 {
		win = 1
	}
	start := now - now%win
	s := &w.shards[maphash.String(w.seed, key)%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e.start != start {
		e = entry{start: start}
	}
	if e.n >= limit {
		return false, time.Duration(start+win-now) * time.Millisecond
	}
	if inc == 0 {
		return true, 0
	}
	e.n += inc
	s.m[key] = e
	if len(s.m) >= s.sweepAt {
		for k, old := range s.m {
			if old.start+2*win <= now { // from a window before the last
				delete(s.m, k)
			}
		}
		s.sweepAt = max(1024, 2*len(s.m))
	}
	return true, 0
}
