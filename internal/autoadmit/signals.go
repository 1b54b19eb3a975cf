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
	"net/netip"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/originhealth"
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

// Bounds are the upper bounds (ms) of the latency histogram's buckets (originhealth.Bounds).
var Bounds = originhealth.Bounds

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

// Samples is the number of latency samples the window's histogram holds: of the requests the
// gates measured, each client's up to its share (originhealth.Period.Settle).
func (w Window) Samples() int64 {
	var n int64
	for _, c := range w.Buckets {
		n += c
	}
	return n
}

// Judged is the number of requests the window's p95 stands on: the latency samples and the
// requests origins reported. How precise a p95 is goes with it, not with the requests.
func (w Window) Judged() int64 { return w.Samples() + w.Reported }

// P95 is the window's p95 latency (ms): the measured histogram's (each client's share of it
// bounded: originhealth), interpolated within its bucket, less the measuring processes' own
// delay (GateDelay), or the requests-weighted mean of the origins' reported p95 when that is
// higher (the worse of the two signals counts). 0 without requests.
func (w Window) P95() float64 {
	var p float64
	if w.Requests > 0 && w.Samples() > 0 {
		q := originhealth.Quantile(w.Buckets, w.Samples(), 0.95)
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

// Signals is one instance's measurements since its last flush, per event. Observe is called
// on the gate's hot path: a map read, a clock read and, under the event's lock, a session's
// entry of the current second.
//
// What the gate measures is kept by session for a second of the wall clock (the controllers'
// windows are whole seconds: Controller.Start) and bounded then, each client's and session's
// share of it (originhealth.Period.Settle); Take hands on the seconds that ended, and the
// origins' own reports at once.
type Signals struct {
	// Now is the clock that cuts the seconds (tests; nil: time.Now).
	Now    func() time.Time
	events sync.Map // event id -> *counts
	sched  schedDelay
	delay  atomic.Int64 // the last Take's reading of sched, µs
	// delayUS, when set, replaces sched.p95us (tests).
	delayUS func() int64
}

type counts struct {
	mu     sync.Mutex
	sec    int64               // the second (Unix) period is of
	period originhealth.Period // what the gate measured in it, by session
	// What is ready to be taken: seconds settled, reports, and what a failed write gave back.
	n, e, gd   int64
	buckets    [96]int64 // >= originhealth.Buckets
	rn, re, rp int64
	ready      bool
}

func (s *Signals) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Signals) of(event string) *counts {
	if c, ok := s.events.Load(event); ok {
		return c.(*counts)
	}
	c, _ := s.events.LoadOrStore(event, new(counts))
	return c.(*counts)
}

// settle makes the period's counts ready (bounded by client and session), with the gate's delay of
// delayUS for each of its requests. Under c.mu.
func (c *counts) settle(delayUS int64) {
	if c.period.Empty() {
		return
	}
	n, e := c.period.Settle(c.buckets[:])
	c.n += n
	c.e += e
	c.gd += n * delayUS
	c.ready = true
}

// Observe counts one request of session (its ticket number) from client (clientaddr.Group of
// the visitor's address) passed to event's origin that took latency (the origin's own time:
// from the request's last byte sent to the answer's first byte, or until its failure) and
// failed when failed (5xx, or no answer).
func (s *Signals) Observe(event string, session int64, client netip.Prefix, latency time.Duration, failed bool) {
	c := s.of(event)
	sec := s.now().Unix()
	b := originhealth.Bucket(float64(latency) / float64(time.Millisecond))
	c.mu.Lock()
	if sec > c.sec { // a new second: the last one is over (a clock stepped back joins the current)
		c.settle(s.delay.Load())
		c.sec = sec
	}
	c.period.Add(session, client, b, failed)
	c.mu.Unlock()
}

// Report counts an origin's own report: requests served since its last report, errors among
// them, and their p95 latency (ms).
func (s *Signals) Report(event string, requests, errors int64, p95ms float64) {
	c := s.of(event)
	c.mu.Lock()
	c.rn += requests
	c.re += errors
	c.rp += int64(math.Round(p95ms * float64(requests)))
	c.ready = true
	c.mu.Unlock()
}

// Take returns the counts of each event since the last Take — the seconds of measurements that
// ended, the reports — as counter deltas for Store.AddSignals, and starts them again from zero.
func (s *Signals) Take() map[string]map[string]int64 { return s.take(false) }

// TakeAll is Take with the current second's measurements too (at shutdown: nothing is left).
func (s *Signals) TakeAll() map[string]map[string]int64 { return s.take(true) }

func (s *Signals) take(all bool) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	var delay int64 // this process's since the last Take
	if s.delayUS != nil {
		delay = s.delayUS()
	} else {
		delay = s.sched.p95us()
	}
	s.delay.Store(delay)
	sec := s.now().Unix()
	s.events.Range(func(k, v any) bool {
		c := v.(*counts)
		c.mu.Lock()
		defer c.mu.Unlock()
		if all || c.sec < sec {
			c.settle(delay)
		}
		if !c.ready {
			return true
		}
		c.ready = false
		d := map[string]int64{}
		put := func(name string, n *int64) {
			if *n != 0 {
				d[name] = *n
				*n = 0
			}
		}
		put(CounterRequests, &c.n)
		put(CounterGateDelay, &c.gd)
		put(CounterErrors, &c.e)
		put(CounterReported, &c.rn)
		put(CounterRepErr, &c.re)
		put(CounterRepP95, &c.rp)
		for i := range originhealth.Buckets {
			put(BucketCounter(i), &c.buckets[i])
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
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, n := range d {
		switch name {
		case CounterRequests:
			c.n += n
		case CounterErrors:
			c.e += n
		case CounterReported:
			c.rn += n
		case CounterRepErr:
			c.re += n
		case CounterRepP95:
			c.rp += n
		case CounterGateDelay:
			c.gd += n
		default:
			if i, err := strconv.Atoi(name[len(bucketPrefix):]); err == nil && i >= 0 && i < originhealth.Buckets {
				c.buckets[i] += n
			}
		}
	}
	c.ready = true
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
