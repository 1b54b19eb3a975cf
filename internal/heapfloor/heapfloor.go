// Package heapfloor keeps the Go garbage collector from running every few megabytes of
// allocation while the live heap is small.
//
// With GOGC=100 the collector runs each time the heap has grown by as much as was live after
// the last collection. An instance on Redis holds little (8 MiB live under a flash crowd of
// joins) and allocates a few kilobytes a request, so it collected seven times a second at
// 17,000 joins a second, and every collection costs more than its marking: the write barrier
// while it runs, the assists it asks of the goroutines that allocate, the sweeping and the
// caches it empties. Measured with `waitroom bench --only http --compare` (docs/scaling.md), a
// goal further from the live heap cut the instance's CPU per join by about a tenth.
//
// A floor is what GOGC cannot say: the heap may always grow by at least Floor bytes between
// two collections, and by GOGC percent of the live heap once that is more. After each
// collection the tuner sets the percent that gives max(live × GOGC/100, Floor) for the next
// one (runtime/debug.SetGCPercent), so a small heap costs at most Floor more memory and a
// large one is collected exactly as GOGC says. GOMEMLIMIT, when the operator sets it, still
// bounds the heap: the runtime collects earlier as it nears the limit, whatever the percent.
// It is the GOGC tuner of Uber's "How We Saved 70K Cores Across 30 Mission-Critical Services"
// (Uber Engineering blog, December 2021), which hears of each collection the same way (an
// object that re-arms its own cleanup), with a fixed floor where theirs derives one from the
// container's memory limit.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// DefaultFloor is serve's floor (64 MiB): what an instance that holds little may grow by
// between two collections.
const DefaultFloor = 64 << 20

// maxPercent bounds the percent set for a tiny heap (a floor of 64 MiB over a live heap of the
// runtime's least goal, 4 MiB, is 1,600).
const maxPercent = 100_000

// minLive is the live heap assumed before the first collection has measured one: the
// runtime's own least heap goal (4 MiB at GOGC=100).
const minLive = 4 << 20

// Percent returns the GOGC percent that lets a heap of live bytes grow by max(live × base/100,
// floor) bytes before the next collection: base when that is the larger, else
// ceil(floor × 100 / live), at most 100,000. base is the operator's GOGC (100 by default).
func Percent(live, floor int64, base int) int {
	live = max(live, minLive)
	if live*int64(base)/100 >= floor {
		return base
	}
	p := (floor*100 + live - 1) / live
	return int(min(p, maxPercent))
}

// tuner re-sets the percent after each collection.
type tuner struct {
	floor   int64
	base    int
	mu      sync.Mutex // orders adjust against stop
	stopped bool
	set     atomic.Int64 // the percent set last
}

// sentinel is an object nobody keeps: its cleanup runs after the collection that finds it
// unreachable, which is how the tuner hears of each collection. It holds a pointer so that the
// runtime does not place it in the tiny allocator, whose objects may never be cleaned up.
type sentinel struct{ _ *int }

// Start sets the floor, in bytes, for the process and returns the function that removes it
// again, restoring the operator's GOGC (it may be called more than once). floor <= 0, or GOGC
// set to off, leaves the collector as it is (stop does nothing).
func Start(floor int64) (stop func()) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if floor <= 0 || base < 0 {
		return func() {}
	}
	t := &tuner{floor: floor, base: base}
	t.adjust() // the last collection's live heap (or minLive before the first)
	t.arm()
	return t.stop
}

// arm makes a sentinel whose cleanup adjusts the percent and arms the next one.
func (t *tuner) arm() {
	s := new(sentinel)
	runtime.AddCleanup(s, func(t *tuner) {
		if t.adjust() {
			t.arm()
		}
	}, t)
}

// adjust sets the percent for the live heap the last collection measured; false once stopped.
func (t *tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	var live int64
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = int64(s[0].Value.Uint64())
	}
	p := Percent(live, t.floor, t.base)
	if int64(p) != t.set.Load() {
		debug.SetGCPercent(p)
		t.set.Store(int64(p))
	}
	return true
}

func (t *tuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.base)
	}
}
