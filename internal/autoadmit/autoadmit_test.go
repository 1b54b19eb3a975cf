package autoadmit

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/originhealth"
)

// TestSignalsTakeSecondsThatEnded: the gate's measurements are handed on once their second
// of the wall clock ended (TakeAll: the current one too), bounded by session; reports at once;
// what a store could not take is given back and taken again.
func TestSignalsTakeSecondsThatEnded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := Signals{delayUS: func() int64 { return 0 }, Now: func() time.Time { return now }}
	for i := range 1000 { // latencies 1..1000 ms from 100 sessions alike: p95 = 950 ms
		s.Observe("e", int64(i%100), testClient(int64(i%100)), time.Duration(i+1)*time.Millisecond, i%100 < 10)
	}
	require.Empty(t, s.Take(), "the second has not ended")
	now = now.Add(time.Second)
	d := s.Take()["e"]
	w := FromCounters(d)
	require.Equal(t, int64(1000), w.Requests)
	require.Equal(t, int64(1000), w.Samples(), "no session over its share")
	require.Equal(t, int64(100), w.Errors, "ten sessions' errors alike: all counted")
	require.InDelta(t, 950, w.P95(), 950*0.075, "within a bucket's width")
	require.InDelta(t, 0.1, w.ErrorRate(), 1e-9)
	require.Empty(t, s.Take(), "taken: nothing until the next observation")
	s.Give("e", d)
	require.Equal(t, d, s.Take()["e"], "what could not be written is written next time")
	s.Report("e", 100, 5, 300)
	w = FromCounters(s.Take()["e"])
	require.InDelta(t, 300, w.P95(), 1e-9, "a report is taken at once")
	require.InDelta(t, 0.05, w.ErrorRate(), 1e-9)

	s.Observe("e", 1, testClient(1), 10*time.Millisecond, false)
	s.Observe("e", 2, testClient(2), 10*time.Millisecond, false)
	require.Empty(t, s.Take())
	require.Equal(t, int64(2), FromCounters(s.TakeAll()["e"]).Requests, "at shutdown, the current second too")

	// A second that ended is settled by the first observation of the next as well.
	s.Observe("e", 1, testClient(1), 10*time.Millisecond, true)
	s.Observe("e", 2, testClient(2), 10*time.Millisecond, true)
	now = now.Add(time.Second)
	s.Observe("e", 3, testClient(3), 10*time.Millisecond, false)
	w = FromCounters(s.Take()["e"])
	require.Equal(t, int64(2), w.Requests)
	require.Equal(t, int64(2), w.Errors)
}

// TestOneSessionCannotMoveTheSignals: one admitted session among honest ones (helper-77's
// attack) — its own 5xx, a burst of fast answers, a run of slow ones — leaves the window's
// error rate and p95 what the honest sessions' say, nor do several sessions of one address
// (helper-80), and a burst neither dilutes the origin's errors nor passes for load; errors of
// many clients still count.
func TestOneSessionCannotMoveTheSignals(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	honest := func(s *Signals) { // 30 sessions, 75 requests, 40-200 ms, no error
		for i := range 75 {
			s.Observe("e", int64(1+i%30), testClient(int64(1+i%30)), time.Duration(40+2*i)*time.Millisecond, false)
		}
	}
	window := func(extra func(s *Signals)) Window {
		s := Signals{delayUS: func() int64 { return 0 }, Now: func() time.Time { return now }}
		honest(&s)
		extra(&s)
		return FromCounters(s.TakeAll()["e"])
	}
	clean := window(func(*Signals) {})
	require.Zero(t, clean.ErrorRate())

	errs := window(func(s *Signals) {
		for range 5 {
			s.Observe("e", 99, testClient(99), 5*time.Millisecond, true)
		}
	})
	require.Zero(t, errs.Errors, "one session's own 5xx are its own")
	require.Equal(t, int64(80), errs.Requests, "but its requests are load")

	for _, sessions := range []int64{2, 3} {
		w := window(func(s *Signals) { // sessions of one address: one client
			for i := range 10 * sessions {
				s.Observe("e", 90+i%sessions, testClient(99), 5*time.Millisecond, true)
			}
		})
		require.Zero(t, w.Errors, "%d sessions of one address", sessions)
	}

	fast := window(func(s *Signals) {
		for range 500 {
			s.Observe("e", 99, testClient(99), time.Millisecond, false)
		}
	})
	require.InDelta(t, clean.P95(), fast.P95(), clean.P95()*0.08, "a burst of fast answers does not lower the p95")
	require.Equal(t, int64(75+2*3), fast.Requests, "a burst counts as twice a session's share of load (the median: 3)")
	require.Equal(t, int64(75+3), fast.Judged(), "and as a session's share of samples")

	slow := window(func(s *Signals) {
		for range 50 {
			s.Observe("e", 99, testClient(99), 5*time.Second, false)
		}
	})
	require.InDelta(t, clean.P95(), slow.P95(), clean.P95()*0.08, "a run of slow answers does not raise it")

	broad := window(func(s *Signals) { // an origin failing a few requests of several sessions
		for i := range 4 {
			s.Observe("e", int64(1+i), testClient(int64(1+i)), 5*time.Millisecond, true)
		}
	})
	require.Equal(t, int64(4), broad.Errors, "errors of several sessions count")

	diluted := window(func(s *Signals) { // the same errors, beside a burst of one session's
		for i := range 4 {
			s.Observe("e", int64(1+i), testClient(int64(1+i)), 5*time.Millisecond, true)
		}
		for range 500 {
			s.Observe("e", 99, testClient(99), time.Millisecond, false)
		}
	})
	require.InDelta(t, broad.ErrorRate(), diluted.ErrorRate(), 0.01, "a burst dilutes the origin's errors")
}

// TestGateDelayCorrectsP95: a gate whose own goroutines waited for a CPU while it measured
// reports that delay with its requests, and the window's p95 is the measured one less it
// (never below a tenth of it); what a store failed to take is given back with it; the
// origins' own reports are not corrected.
func TestGateDelayCorrectsP95(t *testing.T) {
	delay := int64(300_000) // 300 ms
	s := Signals{delayUS: func() int64 { return delay }}
	for range 100 {
		s.Observe("e", 1, testClient(1), 500*time.Millisecond, false)
	}
	d := s.TakeAll()["e"]
	require.Equal(t, int64(100*300_000), d[CounterGateDelay])
	w := FromCounters(d)
	require.InDelta(t, 300, w.GateDelay(), 1e-9)
	raw := originhealth.Quantile(w.Buckets, w.Requests, 0.95)
	require.InDelta(t, raw-300, w.P95(), 1e-9)

	s.Give("e", d)
	delay = 0
	again := s.TakeAll()["e"]
	require.Equal(t, d[CounterGateDelay], again[CounterGateDelay], "given back, and nothing added without delay")

	delay = 10_000_000 // 10 s: more than measured
	s.Observe("e", 1, testClient(1), 500*time.Millisecond, false)
	w = FromCounters(s.TakeAll()["e"])
	require.InDelta(t, originhealth.Quantile(w.Buckets, 1, 0.95)/10, w.P95(), 1e-9, "never below a tenth of the measured")

	w2 := w.Add(*window(100, 400, 0))
	require.GreaterOrEqual(t, w2.P95(), 400.0, "an origin's own report is not corrected")

	// The p95 of a runtime histogram: the lower bound of its bucket.
	bounds := []float64{math.Inf(-1), 0, 0.001, 0.01, 0.1, math.Inf(1)}
	require.Equal(t, 0.01, histP95(bounds, []uint64{0, 10, 80, 10, 0}, 100), "the 95th of 100 is in [0.01, 0.1)")
	require.Equal(t, 0.001, histP95(bounds, []uint64{0, 10, 90, 0, 0}, 100))
	require.Equal(t, 0.0, histP95(bounds, []uint64{5, 0, 0, 0, 0}, 5), "never below 0")
	require.Equal(t, 0.1, histP95(bounds, []uint64{0, 0, 0, 0, 1}, 1))
	// This process's own: read, and zero the first time (nothing to take a difference of).
	var sd schedDelay
	require.Zero(t, sd.p95us())
	require.GreaterOrEqual(t, sd.p95us(), int64(0))
}

func TestSubDetectsReset(t *testing.T) {
	a := FromCounters(map[string]int64{"n": 10, "b3": 10})
	b := FromCounters(map[string]int64{"n": 4, "b3": 4})
	_, ok := b.Sub(a)
	require.False(t, ok)
	d, ok := a.Sub(b)
	require.True(t, ok)
	require.Equal(t, int64(6), d.Requests)
}

var testAuto = event.Auto{Enabled: true, TargetP95: 300 * time.Millisecond, ErrorBudget: 0.01, MinMaxActive: 1, MaxMaxActive: 100_000}

func window(n int64, p95ms, errRate float64) *Window {
	w := Window{Reported: n, RepErrors: int64(math.Round(errRate * float64(n))), RepP95Sum: int64(p95ms * float64(n))}
	return &w
}

func TestDecideRules(t *testing.T) {
	a := testAuto
	s := State{MaxActive: 100, Ceil: 0, Full: true}
	up := Decide(s, a, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(140), up.MaxActive, "slow start at 100 sessions: +40 % (4/√100)")
	require.Equal(t, int64(60), Decide(State{MaxActive: 40, Full: true}, a, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 40, Waiting: 50}).MaxActive,
		"slow start at 40 sessions: +50 %")
	require.Equal(t, int64(610), Decide(State{MaxActive: 518, Full: true, MinP95: 160}, a, Observation{Window: window(900, 164, 0), Span: time.Second, Active: 518, Waiting: 50}).MaxActive,
		"slow start at 518 sessions, p95 near its lowest: +17.6 % (4/√518), not +50 % to 777 where a sharp knee at ~600 hides")
	a500 := a
	a500.TargetP95 = 500 * time.Millisecond // Band 300 ms
	require.Equal(t, int64(617), Decide(State{MaxActive: 592, Full: true, MinP95: 156}, a500, Observation{Window: window(900, 243, 0), Span: time.Second, Active: 592, Waiting: 50}).MaxActive,
		"p95 1.56 x its lowest at 592 sessions (HyStart): +4.1 %, the conservative step, not +10 % to 652")
	require.Contains(t, up.Reason, "raising")
	require.False(t, up.Full, "a new limit starts a window not yet filled")
	filling := Decide(State{MaxActive: 100}, a, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(100), filling.MaxActive, "the window began while the room was filling: no raise on it")
	require.Contains(t, filling.Reason, "filling")
	require.True(t, filling.Full, "the limit reached at the start of the next window")
	require.Equal(t, int64(140), Decide(filling, a, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 95, Waiting: 50}).MaxActive,
		"a window full from its start: raised")
	hy := Decide(State{MaxActive: 100, Full: true, MinP95: 100}, a, Observation{Window: window(100, 150, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(110), hy.MaxActive, "p95 1.5 x its lowest before any breach: capacity is near, +10% (HyStart)")
	css := Decide(State{MaxActive: 100, Full: true, MinP95: 100}, a, Observation{Window: window(100, 130, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(110), css.MaxActive, "p95 1.3 x its lowest: conservative slow start, a quarter of the step, +10% (RFC 9406)")
	require.Equal(t, int64(140), Decide(State{MaxActive: 100, Full: true, MinP95: 100}, a,
		Observation{Window: window(100, 118, 0), Span: time.Second, Active: 100, Waiting: 50}).MaxActive, "p95 within 1.2 x its lowest: the whole step")
	require.Equal(t, 100.0, hy.MinP95)
	low := Decide(State{MaxActive: 100, MinP95: 100}, a, Observation{Window: window(100, 80, 0), Span: time.Second, Active: 10, Waiting: 50})
	require.Equal(t, 80.0, low.MinP95, "the lowest p95 follows a lower window")
	require.Equal(t, 80.0, Decide(low, a, Observation{Window: window(5, 20, 0), Span: time.Second, Active: 10, Waiting: 50}).MinP95,
		"a window of 5 requests is not the origin's p95")
	// The lowest p95 of windows of ~20 requests reads low: a window of 4 x as many measures it afresh.
	small := State{MaxActive: 45, MinP95: 136, MinP95Requests: 24}
	rebased := Decide(small, a, Observation{Window: window(100, 160, 0), Span: time.Second, Active: 45, Waiting: 50})
	require.Equal(t, 160.0, rebased.MinP95, "100 requests at 160 ms (1.18 x) against a lowest of 136 from 24: the lowest is 160")
	require.Equal(t, int64(100), rebased.MinP95Requests)
	require.Equal(t, 136.0, Decide(small, a, Observation{Window: window(95, 160, 0), Span: time.Second, Active: 45, Waiting: 50}).MinP95,
		"95 requests are under 4 x 24: not measured afresh")
	require.Equal(t, 136.0, Decide(small, a, Observation{Window: window(100, 170, 0), Span: time.Second, Active: 45, Waiting: 50}).MinP95,
		"a window over 1.2 x the lowest may queue: not the origin unloaded")
	breached := small
	breached.Ceil = 60
	require.Equal(t, 136.0, Decide(breached, a, Observation{Window: window(100, 160, 0), Span: time.Second, Active: 45, Waiting: 50}).MinP95,
		"after a breach every limit is near the knee: not measured afresh")
	lowPair := func(s State, n int64, p95 float64) State {
		s = Decide(s, a, Observation{Window: window(n, p95, 0), Span: time.Second, Active: 45, Waiting: 50})
		return Decide(s, a, Observation{Window: window(n, p95, 0), Span: time.Second, Active: 45, Waiting: 50})
	}
	require.Equal(t, 160.0, lowPair(rebased, 24, 130).MinP95, "two lower p95s of 24 requests, under a quarter of the 100 that measured it: kept")
	require.Equal(t, 150.0, lowPair(rebased, 25, 150).MinP95, "two lower p95s of 25 requests: taken")
	// A lone low window is not the origin's p95: its neighbour must read low too.
	pair := State{MaxActive: 10, MinP95: 160, MinP95Requests: 20, PrevP95: 170}
	lone := Decide(pair, a, Observation{Window: window(20, 120, 0), Span: time.Second, Active: 10, Waiting: 50})
	require.Equal(t, 160.0, lone.MinP95, "120 ms after a window of 170: the pair reads 170")
	require.Equal(t, 120.0, lone.PrevP95)
	require.Equal(t, 140.0, Decide(lone, a, Observation{Window: window(20, 140, 0), Span: time.Second, Active: 10, Waiting: 50}).MinP95,
		"140 ms after 120: the pair reads 140")
	require.Equal(t, 160.0, Decide(Decide(lone, a, Observation{Window: window(5, 20, 0), Span: time.Second, Active: 10, Waiting: 50}), a,
		Observation{Window: window(20, 140, 0), Span: time.Second, Active: 10, Waiting: 50}).MinP95,
		"a window of 5 requests between them breaks the pair")
	first := Decide(State{MaxActive: 10}, a, Observation{Window: window(20, 120, 0), Span: time.Second, Active: 10, Waiting: 50})
	require.Zero(t, first.MinP95, "the first window alone does not set it")
	require.Equal(t, 130.0, Decide(first, a, Observation{Window: window(20, 130, 0), Span: time.Second, Active: 10, Waiting: 50}).MinP95)
	between := Decide(filling, a, Observation{Span: 500 * time.Millisecond, Active: 60, Waiting: 50})
	require.False(t, between.Full, "the room fell under the limit during the window: not full")
	idle := Decide(s, a, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 40, Waiting: 50})
	require.Equal(t, int64(100), idle.MaxActive, "a limit not reached is not raised")
	empty := Decide(s, a, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 100})
	require.Equal(t, int64(100), empty.MaxActive, "nobody waiting: no raise")
	slow := Decide(s, a, Observation{Window: window(100, 600, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(100), slow.MaxActive, "one window over the target: confirming")
	slow = Decide(slow, a, Observation{Window: window(100, 600, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(70), slow.MaxActive, "p95 twice the target twice: -30% (the most for latency)")
	require.Equal(t, int64(100), slow.Ceil)
	require.Equal(t, Calm, slow.CalmLeft)
	near := Decide(s, a, Observation{Window: window(100, 320, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(100), near.MaxActive, "one window just over: confirming")
	require.Contains(t, near.Reason, "confirming")
	near = Decide(near, a, Observation{Window: window(100, 320, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(93), near.MaxActive, "two windows just over the target: x target / p95 (300/320)")
	few := Decide(State{MaxActive: 100, Over: 1}, a, Observation{Window: window(5, 900, 0), Span: 2 * time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(100), few.MaxActive, "five slow requests are too few to judge latency")
	require.Contains(t, few.Reason, "too few")
	errs := Decide(s, a, Observation{Window: window(100, 100, 0.05), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(70), errs.MaxActive, "errors over budget: -30%")
	drain := Decide(State{MaxActive: 50}, a, Observation{Window: window(100, 600, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(50), drain.MaxActive, "sessions above the limit: wait for them to leave")
	require.Contains(t, drain.Reason, "draining")
	band := Decide(s, a, Observation{Window: window(100, 220, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(100), band.MaxActive, "between Band and High x the target: hold")
	require.Contains(t, band.Reason, "holding")
	high := Decide(s, a, Observation{Window: window(100, 260, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Contains(t, high.Reason, "confirming", "over High x the target, under the target: a decrease is coming")
	high = Decide(high, a, Observation{Window: window(100, 260, 0), Span: time.Second, Active: 100, Waiting: 50})
	require.Equal(t, int64(95), high.MaxActive, "twice over High x the target, under the target: -5%")
	calm := Decide(slow, a, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 70, Waiting: 50})
	require.Equal(t, int64(70), calm.MaxActive)
	require.Equal(t, Calm-1, calm.CalmLeft)
	missing := Decide(State{MaxActive: 120, Ceil: 100}, a, Observation{Quiet: MaxQuiet, Active: 0})
	require.Equal(t, SignalMissing, missing.Signal)
	require.Equal(t, int64(100), missing.MaxActive, "an unconfirmed raise is undone while the signal is missing")
	require.Contains(t, missing.Reason, "holding the last safe value")
	pinned := a
	pinned.PinMaxActive = 42
	require.Equal(t, int64(42), Decide(s, pinned, Observation{Window: window(100, 900, 0.5), Span: time.Second}).MaxActive)
	held := a
	held.Hold = true
	require.Equal(t, int64(100), Decide(s, held, Observation{Window: window(100, 900, 0.5), Span: time.Second}).MaxActive)
	bounded := a
	bounded.MaxMaxActive = 120
	require.Equal(t, int64(120), Decide(s, bounded, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 100, Waiting: 9}).MaxActive)
	atBound := Decide(State{MaxActive: 120, Full: true}, bounded, Observation{Window: window(100, 100, 0), Span: time.Second, Active: 120, Waiting: 9})
	require.Equal(t, int64(120), atBound.MaxActive)
	require.Contains(t, atBound.Reason, "at max_max_active 120: holding", "no raise at the bound says it raised")
	require.Equal(t, 240.0, up.AdmitRate/up.AdmitRate*2*120, "sanity")
}

// TestDecideKnee: the sessions' request rate with the origin unloaded is learnt from windows
// whose p95 is near its lowest; past the origin's knee (the p95 risen, each session's requests
// slowed while the load stays) the limit is not raised, and with the p95 in the hold band it is
// lowered toward the knee, which the p95 band alone holds (docs/autoadmit.md).
func TestDecideKnee(t *testing.T) {
	a := testAuto // target 300 ms: Band 180, High 240
	obs := func(requests int64, p95 float64, active int64) Observation {
		return Observation{Window: window(requests, p95, 0), Span: time.Second, Active: active, Waiting: 50}
	}
	learnt := Decide(State{MaxActive: 50, Full: true, MinP95: 100}, a, obs(100, 110, 50))
	require.InDelta(t, 2.0, learnt.SessionRate0, 1e-9, "100 requests/s of 50 sessions, the p95 near its lowest")
	require.Equal(t, int64(75), learnt.MaxActive, "slow start")
	require.Zero(t, learnt.SessionRate, "the new limit's sessions are measured afresh")
	learnt = Decide(State{MaxActive: 100, Full: true, MinP95: 100, SessionRate0: 2}, a, obs(100, 130, 100))
	require.InDelta(t, 0.9*2+0.1*1, learnt.SessionRate0, 1e-9, "a moving mean, slow down")
	learnt = Decide(State{MaxActive: 100, Full: true, MinP95: 100, SessionRate0: 1}, a, obs(200, 130, 100))
	require.InDelta(t, 0.7*1+0.3*2, learnt.SessionRate0, 1e-9, "quicker up")
	require.InDelta(t, 1.0, Decide(State{MaxActive: 100, Full: true, MinP95: 100, SessionRate0: 1, CalmLeft: 1}, a, obs(50, 130, 100)).SessionRate0, 1e-9,
		"just after a decrease the room refills with visitors yet to come: not learnt")
	require.InDelta(t, 1.0, Decide(State{MaxActive: 100, Full: true, MinP95: 100, SessionRate0: 1}, a, obs(50, 130, 120)).SessionRate0, 1e-9,
		"nor while sessions drain")
	require.InDelta(t, 2.0, Decide(State{MaxActive: 50, MinP95: 100, SessionRate0: 2}, a, obs(50, 110, 50)).SessionRate0, 1e-9,
		"a window begun while the room filled says nothing of the sessions' rate")
	require.InDelta(t, 2.0, Decide(State{MaxActive: 100, Full: true, MinP95: 100, SessionRate0: 2, Ceil: 120}, a, obs(100, 130, 100)).SessionRate0, 1e-9,
		"after a breach every limit is near capacity: a quick window there is not the origin unloaded")
	require.InDelta(t, 1.0, Decide(State{MaxActive: 100, Full: true, MinP95: 100, Ceil: 120}, a, obs(100, 130, 100)).SessionRate0, 1e-9,
		"unless none was learnt before it")

	past := State{MaxActive: 200, Full: true, MinP95: 100, SessionRate0: 2, Ceil: 240}
	cut := Decide(past, a, obs(240, 200, 200))
	require.Equal(t, int64(170), cut.MaxActive, "1.2 of 2 requests/s (60%) with the p95 in the band: x 0.6/0.85, at most -15%")
	require.Contains(t, cut.Reason, "1.20 requests/s, 60% of their 2.00/s unloaded")
	require.Equal(t, int64(200), cut.Ceil)
	require.Zero(t, cut.KneeRequests, "a new limit measures its sessions afresh")
	require.Equal(t, int64(174), Decide(past, a, obs(296, 200, 200)).MaxActive, "74%: x 0.74/0.85")

	require.Equal(t, int64(200), Decide(past, a, obs(100, 200, 200)).MaxActive, "100 requests are too few to judge the rate")
	acc := Decide(past, a, obs(100, 200, 200))
	require.Equal(t, int64(170), Decide(acc, a, obs(100, 200, 200)).MaxActive, "judged on the windows at the limit together")
	shared := obs(240, 200, 200)
	shared.Shared = true
	require.Equal(t, int64(200), Decide(past, a, shared).MaxActive, "other events' sessions share the origin: not judged")
	require.Equal(t, int64(200), Decide(past, a, obs(288, 200, 240)).MaxActive, "sessions above the limit: draining, not cut again")
	slight := Decide(past, a, obs(320, 200, 200))
	require.Equal(t, int64(200), slight.MaxActive, "80% of the unloaded rate in the band: holding")

	veto := Decide(past, a, obs(320, 150, 200))
	require.Equal(t, int64(200), veto.MaxActive, "the p95 under the band, but the sessions slowed to 80%: no raise")
	require.Contains(t, veto.Reason, "knee, holding")
	require.Greater(t, Decide(past, a, obs(360, 150, 200)).MaxActive, int64(200), "90% of the unloaded rate: raised")
	require.True(t, veto.AtKnee)
	held := Decide(veto, a, obs(320, 130, 200))
	require.Equal(t, int64(200), held.MaxActive,
		"held at the knee, a window's p95 under 1.4 x its lowest but over 1.2 x: one quick window does not end the queue")
	require.Contains(t, held.Reason, "knee, holding")
	require.InDelta(t, 2.0, held.SessionRate0, 1e-9, "a window at the knee's limit is not the origin unloaded, whatever its p95")
	released := Decide(held, a, obs(320, 110, 200))
	require.Greater(t, released.MaxActive, int64(200), "the p95 back near its lowest (a restored origin): raised")
	require.False(t, released.AtKnee)
	require.Greater(t, Decide(past, a, obs(320, 130, 200)).MaxActive, int64(200),
		"not held at the knee before: 1.3 x its lowest is not taken for a queue")
	// The slow start's growth is chosen on the worst window at the limit, not on the last one.
	queued := State{MaxActive: 27, Full: true, MinP95: 100, SessionRate0: 2, KneeRequests: 100, KneeSessionS: 54, P95AtLimit: 150}
	require.Equal(t, int64(30), Decide(queued, a, obs(54, 110, 27)).MaxActive,
		"a window at 1.1 x the lowest p95 after one at 1.5 x: +10 %, not the slow start's +50 %")
	queued.P95AtLimit = 0
	require.Equal(t, int64(41), Decide(queued, a, obs(54, 110, 27)).MaxActive, "no window at this limit queued: +50 %")
	require.Equal(t, 150.0, Decide(State{MaxActive: 27, Full: true, MinP95: 100, SessionRate0: 2, P95AtLimit: 120}, a, obs(54, 150, 27)).P95AtLimit)
	require.Zero(t, Decide(queued, a, obs(54, 110, 27)).P95AtLimit, "a new limit measures afresh")
	// ... and on the sessions' rate at the limit: 89 % of the unloaded rate is a sign of the knee
	// the p95 may not show yet.
	slowing := State{MaxActive: 107, Full: true, MinP95: 100, SessionRate0: 2}
	require.Equal(t, int64(118), Decide(slowing, a, obs(190, 110, 107)).MaxActive, "1.78 of 2 requests/s: a quarter of the step, +9.7 %, not +38.7 %")
	require.Equal(t, int64(149), Decide(slowing, a, obs(205, 110, 107)).MaxActive, "1.92 of 2 requests/s: the whole step, +38.7 % (4/√107)")
	require.Equal(t, int64(149), Decide(slowing, a, obs(19, 110, 107)).MaxActive, "19 requests do not measure a rate")
	unmeasured := Decide(past, a, obs(100, 150, 200))
	require.Equal(t, int64(200), unmeasured.MaxActive, "the origin queues and 100 requests do not measure the sessions' rate: no raise yet")
	require.Contains(t, unmeasured.Reason, "100 of 150 requests")
	require.Greater(t, Decide(unmeasured, a, obs(620, 150, 200)).MaxActive, int64(200), "measured over both windows at 90%: raised")
	require.Greater(t, Decide(past, a, obs(240, 130, 200)).MaxActive, int64(200),
		"the p95 near its lowest: the origin does not queue, the sessions are slower for their own reasons")
	// After a cut for the knee (C = 50 halved: 18 -> 15), the way back up: the sessions' rate is
	// measured before a raise when any window at the limit queued, not only the last ...
	afterCut := State{MaxActive: 15, Full: true, MinP95: 100, SessionRate0: 2, Ceil: 18, KneeRequests: 100, KneeSessionS: 60, P95AtLimit: 170}
	quick := Decide(afterCut, a, obs(20, 105, 15))
	require.Equal(t, int64(15), quick.MaxActive, "one quick window of 20 requests after windows at 1.7 x the lowest p95: measuring first")
	require.Contains(t, quick.Reason, "120 of 150 requests")
	beforeBreach := afterCut
	beforeBreach.Ceil = 0
	require.Equal(t, int64(17), Decide(beforeBreach, a, obs(20, 105, 15)).MaxActive,
		"before any breach the slow start does not wait on an earlier window (+10 %: one queued at this limit)")
	// ... and once measured slowed (83 % of the unloaded rate), the raise is the probe's least.
	afterCut.KneeRequests, afterCut.KneeSessionS = 150, 90
	require.Equal(t, int64(16), Decide(afterCut, a, obs(25, 105, 15)).MaxActive, "slowed to 83%, a window at this limit queued: +1, not +10 %")
	unslowed := afterCut
	unslowed.KneeRequests = 180
	require.Equal(t, int64(17), Decide(unslowed, a, obs(30, 105, 15)).MaxActive, "at 100%: +10 % (under 0.85 x the last breach)")
	afterCut.P95AtLimit = 110
	require.Equal(t, int64(17), Decide(afterCut, a, obs(25, 105, 15)).MaxActive, "no window at this limit queued (the origin restored): +10 %")
	// Not back over the last breach while the origin queues under it.
	b := a
	b.TargetP95 = 500 * time.Millisecond // Band 300 ms
	underCeil := State{MaxActive: 491, Full: true, MinP95: 160, Ceil: 496}
	w := func(p95 float64, active int64) Observation {
		return Observation{Window: window(900, p95, 0), Span: time.Second, Active: active, Waiting: 50}
	}
	require.Equal(t, int64(495), Decide(underCeil, b, w(289, 491)).MaxActive, "p95 1.8 x its lowest: +2 % would reach the breach at 496, to 495 only")
	underCeil.MaxActive = 495
	atCeil := Decide(underCeil, b, w(289, 495))
	require.Equal(t, int64(495), atCeil.MaxActive, "just under the last breach, the origin queueing: held")
	require.Contains(t, atCeil.Reason, "just under the last breach at 496")
	require.Equal(t, int64(505), Decide(underCeil, b, w(170, 495)).MaxActive, "the p95 near its lowest (the origin restored): past the last breach")
	underCeil.P95AtLimit = 289
	require.Equal(t, int64(505), Decide(underCeil, b, w(170, 495)).MaxActive,
		"judged on the last window: one that queued at this limit before the restore does not hold it")
}

// plant is a fluid model of an origin of c servers of service time s (ms) behind sessions that
// each send perSession req/s while it keeps up: the p95 is the idle one (1.6 s, a log-normal
// service time) plus three times the mean wait of an M/M/c queue (Sakasegawa's approximation,
// s·ρ^√(2(c+1)) / (c(1−ρ))); past capacity the backlog grows and errors appear. It checks that
// Decide finds the most the objective allows and stays there, without the noise of a real run.
type plant struct {
	servers, s, perSession float64
	backlog                float64
}

func (p *plant) capacity() float64 { return p.servers * 1000 / p.s }

func (p *plant) p95(rho float64) float64 {
	return 1.6*p.s + 3*p.s*math.Pow(rho, math.Sqrt(2*(p.servers+1)))/(p.servers*(1-rho))
}

// step advances one second with active sessions; it returns the window the controller sees
// and the load served.
func (p *plant) step(active float64) (*Window, float64) {
	c := p.capacity()
	offered := active * p.perSession
	rho := offered / c
	served := math.Min(offered, c)
	p.backlog = math.Max(0, p.backlog+offered-c)
	p95 := 30 * p.s
	if rho < 0.999 {
		p95 = p.p95(rho)
	}
	p95 += p.backlog / c * 1000
	errRate := 0.0
	if p.backlog > 2*c {
		errRate, p.backlog = 0.2, 2*c
	}
	return window(int64(served), p95, errRate), served
}

// allowed is the highest load whose p95 is at most target (ms).
func (p *plant) allowed(target float64) float64 {
	lo, hi := 0.0, 0.999
	for range 60 {
		if mid := (lo + hi) / 2; p.p95(mid) <= target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo * p.capacity()
}

func TestControllerSettlesOnAFluidOrigin(t *testing.T) {
	a := testAuto
	a.TargetP95 = 500 * time.Millisecond
	for _, c := range []float64{50, 200, 1000} {
		p := &plant{servers: c / 10, s: 100, perSession: 2}
		s := Start(a)
		active := 0.0
		var loads, limits, p95s []float64
		for sec := 0; sec < 120; sec++ {
			if active < float64(s.MaxActive) {
				active = float64(s.MaxActive) // the room fills at once
			} else {
				active = math.Max(float64(s.MaxActive), active-active/4) // sessions of 4 s leave
			}
			w, served := p.step(active)
			s = Decide(s, a, Observation{Window: w, Span: time.Second, Active: int64(active), Waiting: 1000})
			loads = append(loads, served)
			p95s = append(p95s, w.P95())
			limits = append(limits, float64(s.MaxActive))
		}
		want := p.allowed(500)
		settled := loads[60:]
		lo, hi := minMax(settled)
		t.Logf("C=%v: allowed %.0f, settled load %.0f..%.0f, limits %v", c, want, lo, hi, limits[55:65])
		require.InDelta(t, want, mean(settled), want*0.1, "C=%v", c)
		require.Less(t, (hi-lo)/mean(settled), 0.2, "C=%v: swing", c)
		_, worst := minMax(p95s[60:])
		require.Less(t, worst, 500.0, "C=%v: p95 under the target once settled, every second", c)
	}
}

func minMax(v []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// TestSignalsLoseNothing: requests observed from several goroutines while the seconds turn and
// Take runs beside them are all taken, once (go test -race: under the event's lock).
func TestSignalsLoseNothing(t *testing.T) {
	var sec atomic.Int64
	s := Signals{delayUS: func() int64 { return 0 }, Now: func() time.Time { return time.Unix(sec.Load(), 0) }}
	var taken atomic.Int64
	take := func(all bool) {
		m := s.Take
		if all {
			m = s.TakeAll
		}
		taken.Add(m()["e"][CounterRequests])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			if i%10 == 0 {
				sec.Add(1)
			}
			take(false)
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				s.Observe("e", int64(g*100+i%100), testClient(int64(g*100+i%100)), time.Millisecond, false)
			}
		})
	}
	wg.Wait()
	<-done
	take(true)
	require.Equal(t, int64(4*5000), taken.Load())
}

// BenchmarkObserve is the gate's cost of measuring one passed request (its hot path), from
// all cores: 1,000 sessions, 4 requests in turn each.
func BenchmarkObserve(b *testing.B) {
	var s Signals
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			s.Observe("e", n/4%1000, testClient(n/4%1000), time.Duration(n%500)*time.Millisecond, n%100 == 0)
		}
	})
}

// testClient is session i's client: an address of its own.
func testClient(i int64) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
}
