// Package autoexp is the experiment of admission mode auto (issue 23; `waitroom
// auto-experiment`): for each origin capacity C it starts a simulated origin
// (internal/originsim) of C requests/s that Waitroom is not told, measures the most load its
// objective allows with the visitors' own traffic shape and no Waitroom (a sweep of closed-loop
// sessions), then puts 1 instance (embedded line) or 3 instances (one Redis, one PostgreSQL)
// with their gates in front of it, an event in mode auto, and a crowd larger than C can take
// (internal/crowd's gate mode). It records every second the origin's load and p95 and the
// controller's limits, then halves the origin's servers, then restores them, and reports: the
// time the load took to settle within ±10 % of the most allowed, the p95 after, the swing of
// the load and of the limit once settled, the time to get back under the target after the
// halving and back up after the restore, and what the visitors saw (FIFO, places, max inside).
package autoexp

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/originhealth"
	"github.com/waitroom/waitroom/internal/originsim"
)

// Config configures a run.
type Config struct {
	// Capacities are the origins' capacities C to try (requests/s). Default 50, 200, 1000.
	Capacities []int
	// Instances is 1 (embedded line, SQLite) or 3 (Redis at RedisURL, PostgreSQL at
	// DatabaseURL: a database of its own, dropped at the end).
	Instances   int
	RedisURL    string
	DatabaseURL string
	// Service is the origin's mean service time (default 100 ms); its servers are C x Service.
	Service time.Duration
	// Target is the objective's p95 (default 500 ms), ErrorBudget its error budget (1 %).
	Target      time.Duration
	ErrorBudget float64
	// Requests and Think shape each admitted visitor's traffic (default 10 requests, 400 ms).
	Requests int
	Think    time.Duration
	// Settle, Halved and Restored are the phases' lengths (default 90 s, 40 s, 60 s; a
	// negative Restored skips that phase: it stays negative, so that defaults applied twice
	// keep it skipped).
	Settle, Halved, Restored time.Duration
	// Allowed, when > 0, is taken as the most the objective allows instead of measuring it
	// (the short test: the sweep takes a minute).
	Allowed float64
	// CrowdProcs, when > 0, runs the crowd as that many processes of this binary (`waitroom
	// crowd --gate`, each with its share of the visitors and of their arrival rate) instead of
	// in the instances' process, whose CPU it otherwise shares with the gates it measures
	// through. The binary must be waitroom's (the auto-experiment command; not a test binary).
	CrowdProcs int
	Log        io.Writer
	// Trace, when set, receives one line per second: the origin's load and p95, and the
	// controller's state as stored (limit, active, waiting, the p95 it judged by, its lowest
	// p95, the sessions' rates, its reason). What a diagnosis of the controller reads.
	Trace io.Writer
}

func (c Config) withDefaults() Config {
	if len(c.Capacities) == 0 {
		c.Capacities = []int{50, 200, 1000}
	}
	c.Instances = max(c.Instances, 1)
	if c.Service == 0 {
		c.Service = 100 * time.Millisecond
	}
	if c.Target == 0 {
		c.Target = 500 * time.Millisecond
	}
	if c.ErrorBudget == 0 {
		c.ErrorBudget = 0.01
	}
	if c.Requests == 0 {
		c.Requests = 10
	}
	if c.Think == 0 {
		c.Think = 400 * time.Millisecond
	}
	if c.Settle == 0 {
		c.Settle = 90 * time.Second
	}
	if c.Halved == 0 {
		c.Halved = 40 * time.Second
	}
	if c.Restored == 0 {
		c.Restored = 60 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Second is one second of a run.
type Second struct {
	T         float64 `json:"t"`       // seconds since the crowd started
	Load      float64 `json:"load"`    // requests/s the origin served
	Errors    float64 `json:"errors"`  // requests/s it refused
	P95MS     float64 `json:"p95_ms"`  // p95 of its answers this second
	MaxActive int64   `json:"limit"`   // the controller's effective max_active
	Active    int64   `json:"active"`  // admitted sessions
	Servers   int     `json:"servers"` // the origin's servers
	// GateP95MS is the p95 the controller judged by (the gates' measure, less GateDelayMS,
	// their own scheduling delay), as of this second.
	GateP95MS   float64 `json:"gate_p95_ms"`
	GateDelayMS float64 `json:"gate_delay_ms"`
	buckets     []int64 // this second's latency histogram
	reason      string  // the controller's reason as of this second
}

// Result is one capacity's figures.
type Result struct {
	Capacity  int     `json:"capacity"`   // C, requests/s
	Allowed   float64 `json:"allowed"`    // the most load the objective allows (sweep), requests/s
	SettleS   float64 `json:"settle_s"`   // -1: never settled
	LoadMean  float64 `json:"load_mean"`  // mean load once settled
	P95MS     float64 `json:"p95_ms"`     // p95 of every answer once settled
	LoadSwing float64 `json:"load_swing"` // (max-min)/mean of the 5-s load once settled
	// LimitSwing is (max-min)/mean of the effective max_active once settled.
	LimitSwing float64 `json:"limit_swing"`
	ErrorRate  float64 `json:"error_rate"` // once settled
	// RecoverS is the time from the halving until every 3-s p95 stays under the target
	// (-1: not within the phase); HalvedLoad the mean load of the phase's last 10 s.
	RecoverS   float64 `json:"recover_s"`
	HalvedLoad float64 `json:"halved_load"`
	// RestoreS is the time from the restore until the 5-s load is back at 90 % of Allowed
	// (-1: not within the phase, or no phase: see Restored).
	RestoreS float64 `json:"restore_s"`
	// Restored: the run had the restore phase (the short test skips it, and Holds with it).
	Restored bool `json:"restored"`
	// What the visitors saw.
	FIFOViolations int64    `json:"fifo_violations"`
	Renumbered     int64    `json:"renumbered"`
	MaxInside      int64    `json:"max_inside"`
	MaxLimit       int64    `json:"max_limit"` // the highest effective max_active of the run
	Admitted       int      `json:"admitted"`
	Seconds        []Second `json:"seconds"`
}

// Holds reports whether r meets the figures, and says which does not.
func (r Result) Holds(target time.Duration) []string {
	var out []string
	if r.SettleS < 0 || r.SettleS > 60 {
		out = append(out, fmt.Sprintf("settled in %.0f s (want <= 60)", r.SettleS))
	}
	if r.P95MS > float64(target.Milliseconds()) {
		out = append(out, fmt.Sprintf("p95 %.0f ms after settling (target %d)", r.P95MS, target.Milliseconds()))
	}
	if r.LoadSwing > 0.2 || r.LimitSwing > 0.2 {
		out = append(out, fmt.Sprintf("swing load %.0f%% limit %.0f%% (want <= 20%%)", 100*r.LoadSwing, 100*r.LimitSwing))
	}
	if r.RecoverS < 0 || r.RecoverS > 30 {
		out = append(out, fmt.Sprintf("back under target %.0f s after halving (want <= 30)", r.RecoverS))
	}
	if r.Restored && (r.RestoreS < 0 || r.RestoreS > 60) {
		out = append(out, fmt.Sprintf("back up %.0f s after restoring (want <= 60)", r.RestoreS))
	}
	if r.FIFOViolations > 0 || r.Renumbered > 0 {
		out = append(out, fmt.Sprintf("fifo_violations %d renumbered %d", r.FIFOViolations, r.Renumbered))
	}
	if r.MaxInside > r.MaxLimit {
		out = append(out, fmt.Sprintf("%d visitors inside at once above the highest limit %d", r.MaxInside, r.MaxLimit))
	}
	return out
}

// Allowed measures the most load origin serves with p95 under target for closed-loop sessions
// of requests each followed by think (the visitors' shape), without Waitroom: a bisection on
// the number of sessions, each point held for warm + measure.
func Allowed(ctx context.Context, o *originsim.Origin, target, think time.Duration, capacity int, log io.Writer) float64 {
	srv := httptest.NewServer(o)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096}}
	defer client.CloseIdleConnections()
	point := func(n int) (load, p95 float64) {
		pctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for pctx.Err() == nil {
					req, _ := http.NewRequestWithContext(pctx, http.MethodGet, srv.URL+"/shop", nil)
					if resp, err := client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					t := time.NewTimer(think)
					select {
					case <-pctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			})
		}
		pause(ctx, 2*time.Second)
		a, at := o.Stats(), time.Now()
		pause(ctx, 4*time.Second)
		w := originsim.Between(a, o.Stats(), time.Since(at))
		cancel()
		wg.Wait()
		pause(ctx, time.Second) // the queue empties
		return w.Served, w.P95MS
	}
	// Each session sends about one request per (service + think) at low load.
	lo, hi := 1, int(math.Ceil(float64(capacity)*2*(o.MeanService()+think).Seconds()))
	best := 0.0
	for hi-lo > max(1, lo/50) && ctx.Err() == nil {
		mid := (lo + hi) / 2
		load, p95 := point(mid)
		fmt.Fprintf(log, "  sweep: %d sessions: %.0f req/s, p95 %.0f ms\n", mid, load, p95)
		if p95 <= float64(target.Milliseconds()) {
			lo, best = mid, math.Max(best, load)
		} else {
			hi = mid
		}
	}
	return best
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// sampler reads the origin and the controller every second.
type sampler struct {
	o       *originsim.Origin
	state   func(ctx context.Context) (autoadmit.State, error)
	start   time.Time
	trace   io.Writer // Config.Trace
	mu      sync.Mutex
	seconds []Second
	last    originsim.Stats
	lastAt  time.Time
	maxLim  atomic.Int64
}

func (s *sampler) run(ctx context.Context) {
	s.last, s.lastAt = s.o.Stats(), time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, st := time.Now(), s.o.Stats()
		w := originsim.Between(s.last, st, now.Sub(s.lastAt))
		b := make([]int64, len(st.Buckets))
		for i := range b {
			b[i] = st.Buckets[i] - s.last.Buckets[i]
		}
		sec := Second{T: now.Sub(s.start).Seconds(), Load: w.Served, Errors: w.Errors, P95MS: w.P95MS, Servers: st.Servers, buckets: b}
		if cs, err := s.state(ctx); err == nil {
			sec.MaxActive, sec.Active, sec.reason = cs.MaxActive, cs.Active, cs.Reason
			sec.GateP95MS, sec.GateDelayMS = cs.P95MS, cs.GateDelayMS
			if s.trace != nil {
				fmt.Fprintf(s.trace, "trace t=%5.1f load %5.0f p95 %4.0f | limit %5d active %5d waiting %6d | gate p95 %4.0f at-limit %4.0f min %4.0f | rate %.2f rate0 %.2f of %d req | ceil %d calm %d over %d full %t knee %t | %s\n",
					sec.T, sec.Load, sec.P95MS, cs.MaxActive, cs.Active, cs.Waiting, cs.P95MS, cs.P95AtLimit, cs.MinP95,
					cs.SessionRate, cs.SessionRate0, cs.KneeRequests, cs.Ceil, cs.CalmLeft, cs.Over, cs.Full, cs.AtKnee, cs.Reason)
			}
			for {
				m := s.maxLim.Load()
				if cs.MaxActive <= m || s.maxLim.CompareAndSwap(m, cs.MaxActive) {
					break
				}
			}
		}
		s.last, s.lastAt = st, now
		s.mu.Lock()
		s.seconds = append(s.seconds, sec)
		s.mu.Unlock()
	}
}

func (s *sampler) between(from, to float64) []Second {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Second
	for _, x := range s.seconds {
		if x.T > from && x.T <= to {
			out = append(out, x)
		}
	}
	return out
}

// avg is the mean load of the k seconds ending at i.
func avg(sec []Second, i, k int, f func(Second) float64) float64 {
	var sum float64
	n := 0
	for j := max(0, i-k+1); j <= i; j++ {
		sum += f(sec[j])
		n++
	}
	return sum / float64(max(n, 1))
}

func p95(sec []Second) float64 {
	var b []int64
	var n int64
	for _, s := range sec {
		if b == nil {
			b = make([]int64, len(s.buckets))
		}
		for i, c := range s.buckets {
			b[i] += c
			n += c
		}
	}
	if n == 0 {
		return 0
	}
	return originhealth.Quantile(b, n, 0.95)
}

func load(s Second) float64 { return s.Load }

// analyse computes r's figures from the seconds of the three phases.
func analyse(r *Result, settle, halved, restored []Second, target time.Duration, settleStart float64) {
	tgt := float64(target.Milliseconds())
	// Settled: from the first second after which every 5-s mean stays within ±10 % of Allowed.
	r.SettleS = -1
	for i := range settle {
		ok := true
		for j := max(i, 4); j < len(settle); j++ {
			if m := avg(settle, j, 5, load); math.Abs(m-r.Allowed) > 0.1*r.Allowed {
				ok = false
				break
			}
		}
		if ok && i+4 < len(settle) {
			r.SettleS = settle[i].T - settleStart
			after := settle[i:]
			var sum, errs float64
			lo, hi := math.Inf(1), math.Inf(-1)
			llo, lhi, lsum := math.Inf(1), math.Inf(-1), 0.0
			for j := range after {
				sum += after[j].Load
				errs += after[j].Errors
				if j >= 4 {
					m := avg(after, j, 5, load)
					lo, hi = math.Min(lo, m), math.Max(hi, m)
				}
				l := float64(after[j].MaxActive)
				llo, lhi, lsum = math.Min(llo, l), math.Max(lhi, l), lsum+l
			}
			r.LoadMean = sum / float64(len(after))
			r.LoadSwing = (hi - lo) / r.LoadMean
			r.LimitSwing = (lhi - llo) / (lsum / float64(len(after)))
			r.ErrorRate = errs / math.Max(sum+errs, 1)
			r.P95MS = p95(after)
			break
		}
	}
	r.RecoverS = -1
	if len(halved) > 0 {
		h0 := halved[0].T - 1
		for i := range halved {
			ok := true
			for j := max(i, 2); j < len(halved); j++ {
				if p95(halved[j-2:j+1]) > tgt {
					ok = false
					break
				}
			}
			if ok {
				r.RecoverS = halved[i].T - h0
				break
			}
		}
		tail := halved[max(0, len(halved)-10):]
		var s float64
		for _, x := range tail {
			s += x.Load
		}
		r.HalvedLoad = s / float64(len(tail))
	}
	r.RestoreS, r.Restored = -1, len(restored) > 0
	if r.Restored {
		r0 := restored[0].T - 1
		for j := 4; j < len(restored); j++ {
			if avg(restored, j, 5, load) >= 0.9*r.Allowed {
				r.RestoreS = restored[j].T - r0
				break
			}
		}
	}
}

// sortedCaps returns the capacities in ascending order.
func sortedCaps(c []int) []int {
	out := append([]int(nil), c...)
	sort.Ints(out)
	return out
}
