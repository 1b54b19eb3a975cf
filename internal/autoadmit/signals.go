// Package autoadmit is admission mode "auto" (issue 23): the effective max_active and
// admit_rate of an event follow the measured health of the origin behind it. Its parts:
//
//   - Signals: what each instance measures of the requests it passes to the origin (the gate's
//     reverse proxy) and what origins report of themselves (POST /v1/events/{id}/health, the
//     gate middleware, a polled health URL): requests, errors and a latency histogram, kept in
//     process and added to the event's running totals in the store about once a second
//     (Store.AddSignals; a few counters per instance and second, never per request);
//   - Decide: the controller's rule (docs/autoadmit.md gives the algorithms read and why this
//     one), a pure function of the state, the settings and one window of signals;
//   - Controller: on every instance, once a second, each auto event's controller runs on the
//     one instance holding the event's lease; its state (the effective limits, the probe's
//     memory, the last decisions) lives in the store and is written with a compare-and-set that
//     also applies the limits to the line in the same atomic step (Store.SetControl), so every
//     instance admits at the same limits, an instance that takes the lease over continues
//     from the stored state (neither reset nor doubled), and a stale holder cannot overwrite a
//     newer decision.
package autoadmit

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Counter names of an event's signals in the store (running totals, Store.AddSignals).
const (
	CounterRequests = "n"  // requests the gate passed to the origin and that ended
	CounterErrors   = "e"  // of them, answered 5xx or not answered (502, 504 of the gate)
	CounterReported = "rn" // requests an origin reported (its own count)
	CounterRepErr   = "re" // errors an origin reported
	CounterRepP95   = "rp" // sum over reports of p95 (ms) x requests reported
	bucketPrefix    = "b"  // "b<i>": requests whose latency fell in bucket i (Bounds)
)

// Bounds are the upper bounds (ms) of the latency histogram's buckets: 1 ms growing by 15 %
// per bucket to past a minute, so that a p95 read from them is within 7.5 % of the truth.
// The last bucket counts everything above.
var Bounds = func() []float64 {
	var b []float64
	for v := 1.0; v < 70_000; v *= 1.15 {
		b = append(b, v)
	}
	return b
}()

// bucket returns the index of the bucket of latency ms.
func bucket(ms float64) int {
	if ms <= 1 {
		return 0
	}
	i := int(math.Ceil(math.Log(ms) / math.Log(1.15)))
	// Rounding of the logarithm: step to the first bound >= ms.
	for i > 0 && Bounds[min(i, len(Bounds)-1)-1] >= ms {
		i--
	}
	for i < len(Bounds) && Bounds[i] < ms {
		i++
	}
	return min(i, len(Bounds))
}

// BucketCounter is the counter name of bucket i.
func BucketCounter(i int) string { return bucketPrefix + strconv.Itoa(i) }

// Window is what one span of time saw of an origin: the difference of two readings of an
// event's running totals (or their sum over the events of one origin).
type Window struct {
	Requests, Errors int64
	Buckets          []int64 // len(Bounds)+1
	// Reported, RepErrors and RepP95Sum are the origins' own reports (CounterReported...).
	Reported, RepErrors, RepP95Sum int64
}

// FromCounters reads a Window of running totals from a store's counters.
func FromCounters(c map[string]int64) Window {
	w := Window{Requests: c[CounterRequests], Errors: c[CounterErrors], Reported: c[CounterReported],
		RepErrors: c[CounterRepErr], RepP95Sum: c[CounterRepP95], Buckets: make([]int64, len(Bounds)+1)}
	for i := range w.Buckets {
		w.Buckets[i] = c[BucketCounter(i)]
	}
	return w
}

// Add returns w + o.
func (w Window) Add(o Window) Window {
	r := Window{Requests: w.Requests + o.Requests, Errors: w.Errors + o.Errors, Reported: w.Reported + o.Reported,
		RepErrors: w.RepErrors + o.RepErrors, RepP95Sum: w.RepP95Sum + o.RepP95Sum, Buckets: make([]int64, len(Bounds)+1)}
	for i := range r.Buckets {
		r.Buckets[i] = at(w.Buckets, i) + at(o.Buckets, i)
	}
	return r
}

// Sub returns w - o, or ok false when a count went down (the totals were reset: a store that
// lost them, counters that expired).
func (w Window) Sub(o Window) (Window, bool) {
	r := Window{Requests: w.Requests - o.Requests, Errors: w.Errors - o.Errors, Reported: w.Reported - o.Reported,
		RepErrors: w.RepErrors - o.RepErrors, RepP95Sum: w.RepP95Sum - o.RepP95Sum, Buckets: make([]int64, len(Bounds)+1)}
	ok := r.Requests >= 0 && r.Errors >= 0 && r.Reported >= 0 && r.RepErrors >= 0 && r.RepP95Sum >= 0
	for i := range r.Buckets {
		r.Buckets[i] = at(w.Buckets, i) - at(o.Buckets, i)
		ok = ok && r.Buckets[i] >= 0
	}
	return r, ok
}

func at(b []int64, i int) int64 {
	if i < len(b) {
		return b[i]
	}
	return 0
}

// Total is the number of requests the window saw, measured and reported.
func (w Window) Total() int64 { return w.Requests + w.Reported }

// ErrorRate is the share of errors among all requests (0 without requests).
func (w Window) ErrorRate() float64 {
	if w.Total() == 0 {
		return 0
	}
	return float64(w.Errors+w.RepErrors) / float64(w.Total())
}

// P95 is the window's p95 latency (ms): the measured histogram's, interpolated within its
// bucket, or the requests-weighted mean of the origins' reported p95 when that is higher
// (the worse of the two signals counts). 0 without requests.
func (w Window) P95() float64 {
	var p float64
	if w.Requests > 0 {
		p = Quantile(w.Buckets, w.Requests, 0.95)
	}
	if w.Reported > 0 {
		p = max(p, float64(w.RepP95Sum)/float64(w.Reported))
	}
	return p
}

// Quantile is the q-quantile (ms) of a histogram over Bounds holding n requests, linear
// within the bucket it falls in.
func Quantile(buckets []int64, n int64, q float64) float64 {
	rank := q * float64(n)
	var seen float64
	for i, c := range buckets {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := 0.0, Bounds[len(Bounds)-1]
			if i > 0 {
				lo = Bounds[min(i, len(Bounds))-1]
			}
			if i < len(Bounds) {
				hi = Bounds[i]
			}
			return lo + (hi-lo)*(rank-seen)/float64(c)
		}
		seen += float64(c)
	}
	return Bounds[len(Bounds)-1]
}

// Signals is one instance's measurements since its last flush, per event. Observe is called
// on the gate's hot path: a map read and three atomic adds, no lock once an event is known.
type Signals struct {
	events sync.Map // event id -> *counts
}

type counts struct {
	n, e     atomic.Int64
	buckets  [64 + 32]atomic.Int64 // >= len(Bounds)+1
	rn, re   atomic.Int64
	rp       atomic.Int64
	observed atomic.Bool
}

func (s *Signals) of(event string) *counts {
	if c, ok := s.events.Load(event); ok {
		return c.(*counts)
	}
	c, _ := s.events.LoadOrStore(event, new(counts))
	return c.(*counts)
}

// Observe counts one request passed to event's origin that took latency (until its
// response headers, or its failure) and failed when failed (5xx, or no answer).
func (s *Signals) Observe(event string, latency time.Duration, failed bool) {
	c := s.of(event)
	c.n.Add(1)
	if failed {
		c.e.Add(1)
	}
	c.buckets[bucket(float64(latency)/float64(time.Millisecond))].Add(1)
	c.observed.Store(true)
}

// Report counts an origin's own report: requests served since its last report, errors among
// them, and their p95 latency (ms).
func (s *Signals) Report(event string, requests, errors int64, p95ms float64) {
	c := s.of(event)
	c.rn.Add(requests)
	c.re.Add(errors)
	c.rp.Add(int64(math.Round(p95ms * float64(requests))))
	c.observed.Store(true)
}

// Take returns the counts of each event observed since the last Take (as counter deltas for
// Store.AddSignals) and starts them again from zero.
func (s *Signals) Take() map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	s.events.Range(func(k, v any) bool {
		c := v.(*counts)
		if !c.observed.Swap(false) {
			return true
		}
		d := map[string]int64{}
		put := func(name string, n int64) {
			if n != 0 {
				d[name] = n
			}
		}
		put(CounterRequests, c.n.Swap(0))
		put(CounterErrors, c.e.Swap(0))
		put(CounterReported, c.rn.Swap(0))
		put(CounterRepErr, c.re.Swap(0))
		put(CounterRepP95, c.rp.Swap(0))
		for i := 0; i <= len(Bounds); i++ {
			put(BucketCounter(i), c.buckets[i].Swap(0))
		}
		if len(d) > 0 {
			out[k.(string)] = d
		}
		return true
	})
	return out
}

// Give puts counts that could not be written back (a store that failed), so that they are
// written with the next flush instead of lost.
func (s *Signals) Give(event string, d map[string]int64) {
	c := s.of(event)
	for name, n := range d {
		switch name {
		case CounterRequests:
			c.n.Add(n)
		case CounterErrors:
			c.e.Add(n)
		case CounterReported:
			c.rn.Add(n)
		case CounterRepErr:
			c.re.Add(n)
		case CounterRepP95:
			c.rp.Add(n)
		default:
			if i, err := strconv.Atoi(name[len(bucketPrefix):]); err == nil && i >= 0 && i <= len(Bounds) {
				c.buckets[i].Add(n)
			}
		}
	}
	c.observed.Store(true)
}
