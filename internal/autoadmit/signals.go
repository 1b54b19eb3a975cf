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
	"runtime/metrics"
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
	// CounterGateDelay is the sum over flushes of the measuring process's own scheduling
	// delay (the p95 of the time its goroutines waited for a CPU, µs) x the requests it
	// measured in the flush: what its measured latencies include of its own load.
	CounterGateDelay = "gd"
	bucketPrefix     = "b" // "b<i>": requests whose latency fell in bucket i (Bounds)
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
	// GateDelaySum is CounterGateDelay (µs x requests measured).
	GateDelaySum int64
}

// FromCounters reads a Window of running totals from a store's counters.
func FromCounters(c map[string]int64) Window {
	w := Window{Requests: c[CounterRequests], Errors: c[CounterErrors], Reported: c[CounterReported],
		RepErrors: c[CounterRepErr], RepP95Sum: c[CounterRepP95], GateDelaySum: c[CounterGateDelay], Buckets: make([]int64, len(Bounds)+1)}
	for i := range w.Buckets {
		w.Buckets[i] = c[BucketCounter(i)]
	}
	return w
}

// Add returns w + o.
func (w Window) Add(o Window) Window {
	r := Window{Requests: w.Requests + o.Requests, Errors: w.Errors + o.Errors, Reported: w.Reported + o.Reported,
		RepErrors: w.RepErrors + o.RepErrors, RepP95Sum: w.RepP95Sum + o.RepP95Sum, GateDelaySum: w.GateDelaySum + o.GateDelaySum,
		Buckets: make([]int64, len(Bounds)+1)}
	for i := range r.Buckets {
		r.Buckets[i] = at(w.Buckets, i) + at(o.Buckets, i)
	}
	return r
}

// Sub returns w - o, or ok false when a count went down (the totals were reset: a store that
// lost them, counters that expired).
func (w Window) Sub(o Window) (Window, bool) {
	r := Window{Requests: w.Requests - o.Requests, Errors: w.Errors - o.Errors, Reported: w.Reported - o.Reported,
		RepErrors: w.RepErrors - o.RepErrors, RepP95Sum: w.RepP95Sum - o.RepP95Sum, GateDelaySum: w.GateDelaySum - o.GateDelaySum,
		Buckets: make([]int64, len(Bounds)+1)}
	ok := r.Requests >= 0 && r.Errors >= 0 && r.Reported >= 0 && r.RepErrors >= 0 && r.RepP95Sum >= 0 && r.GateDelaySum >= 0
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
// bucket, less the measuring processes' own delay (GateDelay), or the requests-weighted mean
// of the origins' reported p95 when that is higher (the worse of the two signals counts). 0
// without requests.
func (w Window) P95() float64 {
	var p float64
	if w.Requests > 0 {
		q := Quantile(w.Buckets, w.Requests, 0.95)
		p = max(q-w.GateDelay(), q/10)
	}
	if w.Reported > 0 {
		p = max(p, float64(w.RepP95Sum)/float64(w.Reported))
	}
	return p
}

// GateDelay is the requests-weighted mean (ms) of the measuring processes' own scheduling
// delay while they measured (CounterGateDelay): a gate whose CPU is taken by the waiting
// crowd's polls sees every answer of the origin that much later, and must not take its own
// delay for the origin's (at C = 1,000 on 2 cores, gates measured 515-862 ms for an origin
// answering in 160-180 ms, and the controller cut the limit from 313 to 41). It is the one
// wait for a CPU left in a gate's measure (the transport's reader woken by the answer; the
// gateway times from the request's last byte written to the answer's first byte read); the
// p95 less it is never taken below a tenth of the measured one.
func (w Window) GateDelay() float64 {
	if w.Requests <= 0 {
		return 0
	}
	return float64(w.GateDelaySum) / 1000 / float64(w.Requests)
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
	sched  schedDelay
	// delayUS, when set, replaces sched.p95us (tests).
	delayUS func() int64
}

type counts struct {
	n, e     atomic.Int64
	buckets  [64 + 32]atomic.Int64 // >= len(Bounds)+1
	rn, re   atomic.Int64
	rp       atomic.Int64
	gd       atomic.Int64 // CounterGateDelay given back (Give)
	observed atomic.Bool
}

func (s *Signals) of(event string) *counts {
	if c, ok := s.events.Load(event); ok {
		return c.(*counts)
	}
	c, _ := s.events.LoadOrStore(event, new(counts))
	return c.(*counts)
}

// Observe counts one request passed to event's origin that took latency (the origin's own
// time: from the request's last byte sent to the answer's first byte, or until its failure)
// and failed when failed (5xx, or no answer).
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
	var delay int64 // this process's since the last Take
	if s.delayUS != nil {
		delay = s.delayUS()
	} else {
		delay = s.sched.p95us()
	}
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
		n := c.n.Swap(0)
		put(CounterRequests, n)
		put(CounterGateDelay, c.gd.Swap(0)+n*delay)
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
		case CounterGateDelay:
			c.gd.Add(n)
		default:
			if i, err := strconv.Atoi(name[len(bucketPrefix):]); err == nil && i >= 0 && i <= len(Bounds) {
				c.buckets[i].Add(n)
			}
		}
	}
	c.observed.Store(true)
}

// schedDelay reads this process's scheduling latencies (runtime/metrics
// /sched/latencies:seconds: how long goroutines waited, runnable, for a CPU) since its last
// read.
type schedDelay struct {
	mu     sync.Mutex
	sample [1]metrics.Sample
	prev   []uint64
}

// p95us returns the p95 (µs) of the scheduling latencies since the last call (0 the first
// time, or when none were recorded).
func (d *schedDelay) p95us() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sample[0].Name = "/sched/latencies:seconds"
	metrics.Read(d.sample[:])
	if d.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := d.sample[0].Value.Float64Histogram()
	first := d.prev == nil
	if len(d.prev) != len(h.Counts) {
		d.prev = make([]uint64, len(h.Counts))
	}
	var total uint64
	delta := make([]uint64, len(h.Counts))
	for i, c := range h.Counts {
		delta[i] = c - d.prev[i]
		total += delta[i]
		d.prev[i] = c
	}
	if first || total == 0 {
		return 0
	}
	return int64(histP95(h.Buckets, delta, total) * 1e6)
}

// histP95 is the p95 of a runtime/metrics histogram's counts (total of them; bounds as
// Float64Histogram.Buckets, one more than counts): the lower bound of the bucket it falls in
// (a correction too small rather than too large), never below 0.
func histP95(bounds []float64, counts []uint64, total uint64) float64 {
	rank := uint64(math.Ceil(0.95 * float64(total)))
	var seen uint64
	for i, c := range counts {
		if seen += c; seen >= rank && c > 0 {
			return max(bounds[i], 0)
		}
	}
	return 0
}
