package autoadmit

import (
	"fmt"
	"math"
	"time"

	"github.com/waitroom/waitroom/internal/event"
)

// Tuning of Decide (docs/autoadmit.md explains each).
const (
	// Band and High: the controller raises the limit only while p95 <= Band x target, holds
	// between that and High x target, and lowers it above High x target (two windows in a
	// row). Near capacity latency climbs steeply with load (past capacity more sessions add
	// only queueing), so a setpoint well under the target costs a few percent of load at
	// most, and keeps the noise of a window (a pause of the host) from crossing the target:
	// the objective is judged on the origin's p95 over every 3 s, and a hold band reaching up
	// to the target itself (0.7-1 x, measured in December 2026) put windows over it all along.
	Band = 0.6
	High = 0.8
	// MinDecrease and MaxDecrease bound the factor of a decrease for latency: the limit is
	// multiplied by target/p95 within [MaxDecrease, MinDecrease]. A p95 just over High is
	// still under the target: a cut of 5 % brings it back without the saw of a 10 % one (at
	// 30 sessions, 35 -> 31 -> probes -> 35 swung the limit 22 %).
	MinDecrease = 0.95
	MaxDecrease = 0.7
	// ErrorDecrease is the factor of a decrease for an error rate over its budget.
	ErrorDecrease = 0.7
	// SlowStart is the growth per raise before any breach was seen (+50 %), while the p95 stays
	// within HyStart x the lowest p95 seen (MinP95); past that, before any breach, raises are
	// of Recover. Near capacity this origin's p95 stays low until the last few percent of load
	// (97 % of capacity at 1.6 x its idle p95), so the band alone stops a +50 % step only after
	// it went 50 % past the capacity; TCP's HyStart ends slow start on the same sign, a delay
	// rising over its minimum.
	SlowStart = 0.5
	HyStart   = 1.4
	// SlowStartPool bounds the slow start's growth for a large limit: a raise is at most
	// SlowStartPool/√limit (+50 % up to 64 sessions, +25 % at 256, +16 % at 600). An origin of
	// many servers gives no sign of its knee until just under it: a pool of c servers starts to
	// queue at 1 − β/√c of its capacity (the Halfin–Whitt regime), so its p95 stays flat to a
	// few percent under the capacity (100 servers of ~100 ms, simulated: 157 ms at 86 %, 161 ms
	// at 94 %, 177 ms at 97 %) and the sessions' rate with it. Then only the step itself bounds
	// how far the last raise goes past the knee: at C = 1,000 on one instance a +50 % step from
	// 518 sessions (86 % of the knee, p95 164 ms, full rate) went to 777 where ~600 hold, and the
	// cuts back made a limit swing of 29 % (docs/autoadmit.md). The bound follows the same
	// square root: the larger the limit, the sharper the knee it can hide.
	SlowStartPool = 4.0
	// Conservative: before HyStart, once the p95 is over Conservative x MinP95 the slow start
	// grows by a CSSDivisor-th of its step (+12.5 % under 64 sessions) a raise: HyStart++'s
	// conservative slow start (RFC 9406 section 4.2: a delay over its baseline by an eighth
	// divides the growth by CSS_GROWTH_DIVISOR = 4). A fifth here, not an eighth: a window's
	// p95 is noisier than a round's least RTT. Measured at C = 50 (docs/autoadmit.md): the p95
	// read 1.34 x its lowest at 27 sessions, where ~28 hold, and the +50 % step to 41 overshot
	// by half.
	Conservative = 1.2
	CSSDivisor   = 4
	// SlowStartRate: the slow start takes its whole step only while the sessions' request rate
	// over the windows at the limit (at least MinSamples requests) is at least this share of their
	// rate unloaded (SessionRate0); under it, as over Conservative, it grows by a quarter of
	// that. The p95 of a small origin near its knee often reads as unloaded, the rate does not:
	// at C = 200, 107 sessions read a p95 of 163 ms (1.1 x its lowest) and a rate of 89 %, and
	// the +50 % step went to 161 where ~118 hold (a limit swing of 41 %); at C = 50, 24 sessions
	// read 90 % before a step to 36 where ~32 hold. With the windows aligned (Controller.Start)
	// a window's rate at a steady limit reads within about ±5 % (1.41-1.56 requests/s at C = 50),
	// and at C = 1,000 the slow start's windows read 95-104 % up to ~90 % of the knee.
	SlowStartRate = 0.92
	// Recover is the growth per raise well below the last breach (under 85 % of it).
	Recover = 0.1
	// ProbeStart and ProbeMax bound the growth per raise near and past the last breach: it
	// starts at 2 % and grows by half at each raise in a row, to at most 25 %.
	ProbeStart = 0.02
	ProbeMax   = 0.25
	// Plateau: within this share of the last breach, raises stay at ProbeStart.
	Plateau = 0.05
	// KneeLow and KneeHigh bound the sessions' request rate at the limit, as a share of their
	// rate with the origin unloaded (State.SessionRate0): past an origin's knee more sessions
	// add only queueing (BBR's observation; TCP Vegas compares expected and actual throughput
	// the same way), and each session's requests slow down while the load stays. Under
	// KneeHigh the limit is not raised; under KneeLow, with the p95 over Band x the target, it
	// is lowered toward KneeHigh. Measured (docs/autoadmit.md): sessions of a 20-server origin
	// made 1.9 requests/s unloaded; at 107 sessions 1.85/s (198/s in all), at 138 1.43/s (197/s,
	// the p95 from 170 to 350 ms); the origin halved held 92 sessions at 1.09/s (0.57) before a
	// spike over the target, where 60 sessions made the same 100/s.
	KneeLow  = 0.75
	KneeHigh = 0.85
	// KneeSamples is the fewest requests, in windows full from their start at one limit, the
	// sessions' rate at that limit is judged on: a count of n requests is ±1/√n (Poisson), so
	// 150 is ±8 %, where a 1-s window of 50 at C = 50 read 61-81 % of the unloaded rate at one
	// limit and cut it by a third on the low reading. KneeDecrease bounds a cut for the knee:
	// the rate is an estimate, a deeper cut repeats after Calm.
	KneeSamples  = 150
	KneeDecrease = 0.85
	// Calm is the number of decisions after a decrease before the limit may rise again.
	Calm = 2
	// Rebase: a window of this many times MinP95Requests measures the origin's lowest p95
	// afresh (State.MinP95): its p95 is about twice as precise (±1/√n).
	Rebase = 4
	// MinSamples is the fewest requests a window of a step needs for a decision; a window of
	// FewSpan decides on MinFew (a small start: one session sends a few requests a second);
	// MaxQuiet is the longest window without MinFew before the signal is missing.
	MinSamples = 20
	MinFew     = 3
	FewSpan    = time.Second
	MaxQuiet   = 5 * time.Second
	// MaxDecisions is how many of its last changes the state keeps (the console lists them).
	MaxDecisions = 20
)

// Signal states of State.Signal.
const (
	SignalOK      = "ok"      // the last window had enough requests to decide on
	SignalMissing = "missing" // no signal for MaxQuiet: the last safe value is held
	SignalWaiting = "waiting" // a window is being gathered (after a change, at a start)
)

// State is an event's controller state, kept in the store (Store.SetControl) and read by every
// instance. JSON, as the API shows it (GET /v1/events/{id}/auto).
type State struct {
	// Seq counts the state's writes (the compare-and-set's version).
	Seq int64 `json:"seq"`
	// MaxActive and AdmitRate are the effective limits the line applies.
	MaxActive int64   `json:"max_active"`
	AdmitRate float64 `json:"admit_rate"`
	// Ceil is the limit at the last breach of the objective (0: none seen yet), Probe the
	// raises in a row since, CalmLeft the decisions to wait before raising again.
	Ceil     int64 `json:"ceil"`
	Probe    int   `json:"probe"`
	CalmLeft int   `json:"calm_left"`
	// Over counts the windows in a row whose p95 was over High x the target (a decrease for
	// latency needs two in a row: a lone slow window is noise — a pause of the host — more
	// often than load).
	Over int `json:"over"`
	// MinP95 is the origin's p95 (ms) unloaded, for HyStart: the lowest p95 of two windows in
	// a row (the higher of the two) of at least MinSamples requests within the error budget.
	// MinP95Requests is the requests the later window's p95 stands on (Window.Judged);
	// PrevP95 the last window's p95 when it counted (0 otherwise). The p95 of ~20 requests is
	// some percentile between the 80th and the 99th, and the least of many such lone windows
	// reads low: at C = 1,000, 133–136 ms, where windows of hundreds read 155–165 ms, so that
	// 1.2 x it was the origin's own p95 unloaded and the slow start climbed in +12 % steps from
	// 8 to 44 sessions (settled in 60 and 73 s). A low window now needs its neighbour to read
	// low as well; and before any breach a window of at least Rebase x as many requests, not
	// queued (p95 within Conservative x MinP95: at C = 1,000 a window of 1,010 requests at the
	// knee read 1.23 x a lowest of 149 ms), sets it alone, whether higher or lower; a lower
	// pair whose window has under 1/Rebase of MinP95Requests does not.
	MinP95         float64 `json:"min_p95_ms,omitempty"`
	MinP95Requests int64   `json:"min_p95_requests,omitempty"`
	PrevP95        float64 `json:"prev_p95_ms,omitempty"`
	// Full: the limit was reached (active >= 90 % of it, people waiting) when the window
	// being gathered started, and at every step since. A raise needs it: a window that began
	// while the room was still filling measured fewer sessions than the limit, and raising on
	// it overshoots (the slow start went 41 -> 62 -> 93 past a capacity of ~70 sessions).
	Full bool `json:"full"`
	// SessionRate0 is the sessions' request rate (requests/s per active session) with the
	// origin unloaded: a moving mean over windows full from their start, of at least
	// MinSamples requests, within the error budget and with the p95 within HyStart x MinP95,
	// none draining or just after a decrease, none at a limit held at the knee, and once known
	// none after the first breach (0: none yet; sessionRates says why). SessionRate is their
	// rate at the current limit: KneeRequests requests over KneeSessionS session-seconds of the
	// windows full from their start since the limit was set (0 until KneeSamples requests).
	SessionRate0 float64 `json:"session_rate0,omitempty"`
	SessionRate  float64 `json:"session_rate,omitempty"`
	KneeRequests int64   `json:"knee_requests,omitempty"`
	KneeSessionS float64 `json:"knee_session_s,omitempty"`
	// AtKnee: the sessions' rate at the current limit was judged under KneeHigh with the
	// origin queueing (the knee). Until the limit changes the origin is then taken to
	// queue while a window's p95 is over Conservative x MinP95, not HyStart x: at the knee a
	// window of ~50 requests now and then reads under HyStart x MinP95 (C = 50, 32 sessions:
	// one window of 35 read 238 ms against 239, the others 248-383 ms), and a raise on it went
	// past the knee, then a cut, a swing of 18.6 %. Such windows do not teach SessionRate0
	// either. Once the origin is restored its p95 falls back to its lowest and the hold lets go.
	AtKnee bool `json:"at_knee,omitempty"`
	// P95AtLimit is the highest p95 (ms) of the windows full from their start at the current
	// limit (0 until one): the slow start's growth is chosen on it, not on the last window's
	// alone. At C = 50 on three instances, 27 sessions read 1.5 x the lowest p95 while the
	// sessions' rate there was measured; the window that completed the measure read under
	// 1.2 x, and the +50 % step it allowed went to 41 where ~30 hold (a limit swing of 37 %).
	P95AtLimit float64 `json:"p95_at_limit_ms,omitempty"`
	// Signal is SignalOK, SignalMissing or SignalWaiting; Reason says why the limits are
	// what they are, in words, as of the last step.
	Signal string `json:"signal"`
	Reason string `json:"reason"`
	// The last window measured: the origin's p95 (ms), error rate (0..1) and load (requests/s),
	// the sessions active and waiting, and when (Unix ms, the deciding instance's clock: for
	// people, not for order).
	P95MS float64 `json:"p95_ms"`
	// GateDelayMS is what P95MS was corrected by: the measuring gates' own delay in the
	// window (Window.GateDelay).
	GateDelayMS float64 `json:"gate_delay_ms"`
	ErrorRate   float64 `json:"error_rate"`
	Load        float64 `json:"load"`
	Active      int64   `json:"active"`
	Waiting     int64   `json:"waiting"`
	At          int64   `json:"at"`
	// Holder is the instance that wrote the state.
	Holder string `json:"holder"`
	// Decisions are the last changes of the limits, newest last.
	Decisions []Decision `json:"decisions"`
}

// Decision is one change of the effective limits.
type Decision struct {
	At        int64   `json:"at"` // Unix ms
	MaxActive int64   `json:"max_active"`
	AdmitRate float64 `json:"admit_rate"`
	Reason    string  `json:"reason"`
}

// Observation is what one step knows: a window of the origin's signals (nil: not enough yet,
// see Quiet) and the line's sessions.
type Observation struct {
	Window  *Window
	Span    time.Duration // the window's length
	Quiet   time.Duration // with Window nil: how long no decision could be made
	Active  int64         // admitted sessions now
	Waiting int64         // tickets in line now
	// Shared: the window holds the requests of other events' sessions too (events naming the
	// same auto.origin): the sessions' request rate is not this event's, and the knee rule
	// (KneeLow) is not applied.
	Shared bool
}

// Start is the state of a controller that has none: the safe end of the bounds, or the
// effective limits the line has when it had some in bounds (a switch of mode mid-sale).
func Start(a event.Auto) State {
	return State{MaxActive: a.MinMaxActive, AdmitRate: a.PaceRate(a.MinMaxActive), Signal: SignalWaiting,
		Reason: "starting at the least max_active allowed"}
}

// Decide returns the next state from s, the event's settings a and what the step observed.
// It is the whole rule, pure: docs/autoadmit.md describes it. The state's Seq, At and Holder
// are the caller's.
func Decide(s State, a event.Auto, o Observation) State {
	n := s
	n.Active, n.Waiting = o.Active, o.Waiting
	limit := s.MaxActive
	if o.Window != nil {
		w := *o.Window
		n.Signal = SignalOK
		n.P95MS, n.ErrorRate, n.GateDelayMS = w.P95(), w.ErrorRate(), w.GateDelay()
		n.Load = float64(w.Total()) / max(o.Span.Seconds(), 1e-3)
		n.PrevP95 = 0
		if t := w.Judged(); t >= MinSamples && n.ErrorRate <= a.ErrorBudget && n.P95MS > 0 {
			n.PrevP95 = n.P95MS
			switch paired := max(n.P95MS, s.PrevP95); {
			case s.Ceil == 0 && !s.AtKnee && s.MinP95 > 0 && t >= Rebase*s.MinP95Requests && n.P95MS <= Conservative*s.MinP95:
				n.MinP95, n.MinP95Requests = n.P95MS, t // a window about twice as precise (State.MinP95)
			case s.PrevP95 > 0 && (s.MinP95 == 0 || paired < s.MinP95 && t*Rebase >= s.MinP95Requests):
				n.MinP95, n.MinP95Requests = paired, t // confirmed by the window before (State.MinP95)
			}
		}
	} else if o.Quiet >= MaxQuiet {
		n.Signal = SignalMissing
	} else {
		n.Signal = SignalWaiting
	}
	target := float64(a.TargetP95) / float64(time.Millisecond)
	high := High * target
	eff := sessionRates(s, &n, a, o)
	// The limit reached now; Full (for the next window) needs it at the window's start and at
	// every step since.
	reached := o.Waiting > 0 && float64(o.Active) >= 0.9*float64(limit)
	if o.Window != nil {
		n.Full = reached // the next window starts now
	} else {
		n.Full = s.Full && reached
	}
	switch {
	case a.PinMaxActive > 0:
		limit = a.PinMaxActive
		n.Reason = "pinned by the operator"
	case a.Hold:
		n.Reason = "held by the operator"
	case o.Window == nil && n.Signal == SignalMissing:
		if s.Ceil > 0 && limit > s.Ceil {
			limit = s.Ceil // the last raise was never confirmed: back to what was safe
		}
		n.Reason = fmt.Sprintf("no signal from the origin for %.0f s: holding the last safe value", o.Quiet.Seconds())
	case o.Window == nil:
		n.Reason = "gathering the origin's signals"
	case o.Active > limit && (n.ErrorRate > a.ErrorBudget || n.P95MS > high):
		n.Reason = fmt.Sprintf("draining: %d sessions active above the limit %d; admitting nobody", o.Active, limit)
	case n.ErrorRate > a.ErrorBudget:
		limit = int64(math.Floor(float64(limit) * ErrorDecrease))
		n.Ceil, n.Probe, n.CalmLeft = s.MaxActive, 0, Calm
		n.Reason = fmt.Sprintf("error rate %.1f%% over the budget %.1f%%", 100*n.ErrorRate, 100*a.ErrorBudget)
	case n.P95MS > high && o.Window.Judged() < MinSamples:
		n.Over = 0
		n.Reason = fmt.Sprintf("p95 %.0f ms over %.0f%% of the target, but of %d requests only: too few to judge, holding", n.P95MS, 100*High, o.Window.Judged())
	case n.P95MS > high && s.Over == 0:
		n.Over = 1
		n.Reason = fmt.Sprintf("p95 %.0f ms over %.0f%% of the target %.0f ms in one window: confirming", n.P95MS, 100*High, target)
	case n.P95MS > high:
		n.Over = 0
		f := min(MinDecrease, max(MaxDecrease, target/n.P95MS))
		limit = int64(math.Floor(float64(limit) * f))
		n.Ceil, n.Probe, n.CalmLeft = s.MaxActive, 0, Calm
		n.Reason = fmt.Sprintf("p95 %.0f ms over %.0f%% of the target %.0f ms", n.P95MS, 100*High, target)
	case eff > 0 && eff < KneeLow && n.P95MS > Band*target && o.Active <= limit:
		n.Over = 0
		f := min(MinDecrease, max(KneeDecrease, eff/KneeHigh))
		limit = int64(math.Floor(float64(limit) * f))
		n.Ceil, n.Probe, n.CalmLeft = s.MaxActive, 0, Calm
		n.Reason = fmt.Sprintf("sessions make %.2f requests/s, %.0f%% of their %.2f/s unloaded: past the origin's knee more sessions only queue", n.SessionRate, 100*eff, n.SessionRate0)
	case n.P95MS > Band*target:
		n.Probe, n.Over = 0, 0
		n.Reason = fmt.Sprintf("p95 %.0f ms between %.0f%% and %.0f%% of the target: holding", n.P95MS, 100*Band, 100*High)
	case s.CalmLeft > 0:
		n.CalmLeft, n.Over = s.CalmLeft-1, 0
		n.Reason = "waiting after a decrease"
	case o.Waiting == 0 || float64(o.Active) < 0.9*float64(limit):
		n.Over = 0
		n.Reason = fmt.Sprintf("the limit is not reached (%d active of %d, %d waiting): no reason to raise it", o.Active, limit, o.Waiting)
	case !s.Full:
		n.Over = 0
		n.Reason = fmt.Sprintf("the limit %d is reached, but the window began while the room was filling: measuring it full before raising", limit)
	case eff > 0 && eff < KneeHigh:
		n.Over = 0
		n.Reason = fmt.Sprintf("sessions make %.2f requests/s, %.0f%% of their %.2f/s unloaded: at the origin's knee, holding", n.SessionRate, 100*eff, n.SessionRate0)
	case eff == 0 && n.SessionRate == 0 && n.SessionRate0 > 0 && !o.Shared && queuedAtLimit(s, n) > HyStart*s.MinP95:
		// The origin queues and the sessions' rate at this limit is not measured yet (a
		// small origin gives KneeSamples only over a few windows): a raise now would skip
		// the knee's veto and saw past it (C = 100: 52 -> 58 -> ... -> 68, cut to 57, again).
		n.Over = 0
		p95 := queuedAtLimit(s, n)
		n.Reason = fmt.Sprintf("the origin queues (p95 %.0f ms at this limit, %.1f x its lowest): measuring the sessions' request rate at this limit before raising (%d of %d requests)", p95, p95/s.MinP95, n.KneeRequests, KneeSamples)
	default:
		n.Over = 0
		var g float64
		p95 := max(n.P95MS, n.P95AtLimit) // the worst window at this limit (State.P95AtLimit)
		slowed := n.KneeRequests >= MinSamples && n.SessionRate0 > 0 && !o.Shared &&
			float64(n.KneeRequests) < SlowStartRate*n.SessionRate0*n.KneeSessionS
		ss := min(SlowStart, SlowStartPool/math.Sqrt(float64(limit))) // the larger the limit, the sharper the knee it can hide
		switch {
		case s.Ceil == 0 && !slowed && (s.MinP95 == 0 || p95 <= Conservative*s.MinP95):
			g = ss
		case s.Ceil == 0 && p95 <= HyStart*s.MinP95:
			g = ss / CSSDivisor // the p95 rises over its lowest, or the sessions slow: capacity may be near (HyStart++)
		case s.Ceil == 0:
			// The p95 is rising over its lowest: capacity is near (HyStart). No more than the
			// conservative step for a weaker sign: at 592 sessions of C = 1,000 (p95 1.56 x its
			// lowest) +10 % went to 652, where the conservative step, +4 %, was 616.
			g = min(Recover, ss/CSSDivisor)
		case slowed && p95 > Conservative*s.MinP95:
			// After a breach, the sessions slowed at this limit and the origin queued in a
			// window at it: the knee is a step away, whatever the last breach says (after a
			// cut for the knee from 18 to 15 at C = 50 halved, +10 % went to 17, where the
			// sessions made 74 % of their rate unloaded and the 1-s p95 read up to 465 ms
			// against a target of 500). At the next limit, measured afresh, an origin that
			// no longer queues (restored) gets the probe's growth back.
			g = ProbeStart
		case float64(limit) < 0.85*float64(s.Ceil):
			g = Recover
		case math.Abs(float64(limit)-float64(s.Ceil)) <= Plateau*float64(s.Ceil):
			g = ProbeStart // near the last breach: small steps, not growing (CUBIC's plateau)
		default:
			g = min(ProbeMax, ProbeStart*math.Pow(1.5, float64(s.Probe)))
			n.Probe = s.Probe + 1
		}
		next := max(limit+1, int64(math.Ceil(float64(limit)*(1+g)-1e-9))) // 1e-9: 100 x 1.1 is 110, not 111
		if limit < s.Ceil && next >= s.Ceil && s.MinP95 > 0 && n.P95MS > Conservative*s.MinP95 {
			// Not back over the last breach while the origin queues under it (CUBIC's plateau
			// without its convex probe): past a knee as sharp as a pool of 100 servers' (p95
			// 289 ms at 491 sessions, 495 ms at 496, 3 s at 501) each probe over it read six
			// times the target and was cut by the most, 30 %. Judged on the last window, not the
			// worst at this limit: once the origin no longer queues (restored) its p95 falls back
			// near its lowest and the probe goes on past it (on the worst window, C = 50 halved
			// held 15 sessions under a breach at 16 for the whole minute after the restore).
			if next = s.Ceil - 1; next <= limit {
				n.Reason = fmt.Sprintf("p95 %.0f ms, %.1f x its lowest, just under the last breach at %d: holding", n.P95MS, n.P95MS/s.MinP95, s.Ceil)
				break
			}
			g = float64(next)/float64(limit) - 1
		}
		limit = next
		n.Reason = fmt.Sprintf("p95 %.0f ms and errors %.1f%% within the objective: raising by %.0f%%", n.P95MS, 100*n.ErrorRate, 100*g)
	}
	if limit > s.MaxActive && s.MaxActive >= a.MaxMaxActive {
		// A raise the bound takes back says so (helper-80: "raising by 12 %" at the bound).
		n.Reason = fmt.Sprintf("p95 %.0f ms and errors %.1f%% within the objective, at max_max_active %d: holding", n.P95MS, 100*n.ErrorRate, a.MaxMaxActive)
	}
	limit = min(max(limit, a.MinMaxActive), a.MaxMaxActive)
	if limit != s.MaxActive {
		n.Full = false // a new window starts with the new limit, not yet filled
		n.KneeRequests, n.KneeSessionS, n.SessionRate, n.AtKnee, n.P95AtLimit = 0, 0, 0, false, 0
	}
	n.MaxActive, n.AdmitRate = limit, a.PaceRate(limit)
	return n
}

// queuedAtLimit is the p95 (ms) by which the origin is judged to queue at n's limit before a
// raise that needs the sessions' rate measured: after a breach the worst window at the limit
// (State.P95AtLimit), not only the last (at C = 50 halved, 15 sessions read 230-285 ms against
// a lowest of 161, then one window of 20 requests 169 ms, and its raise to 17 went past the
// knee, 74 %, and was cut to 14); before any breach the last window's, as the slow start
// already chooses its step on the worst (at a small limit 150 requests take many windows, and
// one window of ~20 requests reading 1.6 x a lowest p95 that another such window gave held 11
// sessions of a 1,000-request/s origin for 15 s).
func queuedAtLimit(s, n State) float64 {
	if s.Ceil > 0 {
		return max(n.P95MS, n.P95AtLimit)
	}
	return n.P95MS
}

// sessionRates measures the sessions' request rates of the knee rule into n (n's P95MS and
// ErrorRate already set from o's window): SessionRate0 from a window of the origin unloaded,
// SessionRate over the windows full from their start at the current limit. It returns the
// rate at the limit as a share of the rate unloaded while the origin queues (its p95 over
// HyStart x its lowest, or over Conservative x its lowest once held at the knee: State.AtKnee),
// 0 when that is not known or it does not queue.
func sessionRates(s State, n *State, a event.Auto, o Observation) float64 {
	if o.Window != nil && s.Full && !o.Shared && o.Active > 0 {
		w := *o.Window
		r := float64(w.Total()) / max(o.Span.Seconds(), 1e-3) / float64(o.Active)
		if w.Total() >= MinSamples && n.ErrorRate <= a.ErrorBudget && s.MinP95 > 0 && n.P95MS <= HyStart*s.MinP95 &&
			o.Active <= s.MaxActive && s.CalmLeft == 0 && !s.AtKnee && (s.Ceil == 0 || s.SessionRate0 == 0) {
			// Not while sessions drain after a decrease, nor just after one: the room then
			// fills with sessions admitted at once whose visitors have not come yet; nor at a
			// limit found at the knee, whose quicker windows are still the knee's (at C = 50
			// they drew the unloaded rate from 1.95 down to 1.86 in 20 s, until the rate at
			// the limit read 85 % of it and the limit went up past the knee again); nor after
			// a breach once it is known: every limit then is near the origin's capacity, and
			// a window of ~20 requests whose p95 reads low is still a queue's (at C = 50
			// halved, 17 sessions made 1.24 requests/s in windows of 176-202 ms against a
			// lowest of 172, and drew it from 1.87 to 1.54 in 15 s, until the knee no longer
			// showed and the limit went past it). A moving mean quicker up than down: a lower
			// rate is more often such a refill than the visitors' own change.
			switch {
			case s.SessionRate0 == 0:
				n.SessionRate0 = r
			case r > s.SessionRate0:
				n.SessionRate0 = 0.7*s.SessionRate0 + 0.3*r
			default:
				n.SessionRate0 = 0.9*s.SessionRate0 + 0.1*r
			}
		}
		n.KneeRequests, n.KneeSessionS = s.KneeRequests+w.Total(), s.KneeSessionS+float64(o.Active)*o.Span.Seconds()
		n.P95AtLimit = max(s.P95AtLimit, n.P95MS)
		if n.KneeRequests >= KneeSamples {
			n.SessionRate = float64(n.KneeRequests) / n.KneeSessionS
		}
	}
	queues := HyStart
	if s.AtKnee {
		queues = Conservative
	}
	if n.SessionRate > 0 && n.SessionRate0 > 0 && s.MinP95 > 0 && n.P95MS > queues*s.MinP95 {
		eff := n.SessionRate / n.SessionRate0
		n.AtKnee = s.AtKnee || eff < KneeHigh
		return eff
	}
	n.AtKnee = false
	return 0
}

// Changed reports whether n's limits differ from s's.
func Changed(s, n State) bool { return s.MaxActive != n.MaxActive || s.AdmitRate != n.AdmitRate }

// Record appends n's change of the limits to its Decisions (keeping MaxDecisions).
func (n *State) Record(at time.Time) {
	n.Decisions = append(n.Decisions, Decision{At: at.UnixMilli(), MaxActive: n.MaxActive, AdmitRate: n.AdmitRate, Reason: n.Reason})
	if len(n.Decisions) > MaxDecisions {
		n.Decisions = append([]Decision(nil), n.Decisions[len(n.Decisions)-MaxDecisions:]...)
	}
}
