package crowd

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Report is what the users of one run saw. It is written as the JSON report (--json).
type Report struct {
	Event   string   `json:"event"`
	Targets []string `json:"targets"`
	// Users is the number of simulated users asked for.
	Users int `json:"users"`
	// DurationS is the wall time from the first user started to the last one finished (or the
	// deadline), event setup excluded.
	DurationS float64 `json:"duration_s"`
	// DeadlineReached is true when the run was stopped by the deadline (or cancelled).
	DeadlineReached bool `json:"deadline_reached"`

	// Requests counts the HTTP requests the users sent (joins, polls, leaves, challenges;
	// retries included; event setup excluded).
	Requests int64 `json:"requests"`
	// Joined counts users whose join was answered 200/201 with a ticket.
	Joined int64 `json:"joined"`
	// JoinsPerS is Joined divided by the time from the first join sent to the last successful
	// join answered.
	JoinsPerS float64 `json:"joins_per_s"`
	// JoinLatencyMS and StatusLatencyMS cover every join / status request that got an HTTP
	// answer (any status code), body read included.
	JoinLatencyMS   Latency `json:"join_latency_ms"`
	StatusLatencyMS Latency `json:"status_latency_ms"`
	// TimeToAdmissionS runs from sending a user's first join (or, for an event with a
	// challenge, starting to solve the first) to receiving ADMITTED.
	TimeToAdmissionS AdmissionTime `json:"time_to_admission_s"`

	// Admitted counts users that received ADMITTED.
	Admitted int64 `json:"admitted"`
	// Left counts admitted users whose DELETE was answered 2xx or 404.
	Left int64 `json:"left"`
	// Terminal counts users that ended without admission, by ticket status (EXPIRED, CLOSED,
	// SOLD_OUT, COMPLETED), and for a 410 CLOSED or SOLD_OUT as its problem says, else GONE.
	Terminal map[string]int64 `json:"terminal"`
	// Failed counts users that gave up after an error: an unexpected 4xx (5xx, 429 and
	// transport errors are retried until the deadline).
	Failed int64 `json:"failed"`
	// Lost counts users neither admitted, nor terminal, nor failed when the run ended: still
	// waiting at the deadline, or never started because of it.
	Lost int64 `json:"lost"`
	// Errors counts failed requests by HTTP status code ("500", "429", ...), "transport" (no
	// answer, timeouts included), "decode" (a 2xx without a ticket) and "bad_status" (an unknown
	// ticket status). A 404 on a poll and a 410 are not errors.
	Errors map[string]int64 `json:"errors"`
	// Failovers counts the times a user moved to the next target after a failed request (or
	// push socket); Rejoins the joins sent again, with the same Idempotency-Key, for tickets
	// that answered 404 twice in a row (lost by the store). See runUser.
	Failovers int64 `json:"failovers"`
	Rejoins   int64 `json:"rejoins"`

	// FIFOViolations counts answers that contradict the order of the line: ADMITTED with
	// number > its own serving, or QUEUED with number <= the highest serving seen in any answer
	// received before the request was sent. FIFOExamples holds the first few.
	FIFOViolations int64         `json:"fifo_violations"`
	FIFOExamples   []FIFOExample `json:"fifo_examples"`

	// PushLatencyMS (with --push) runs from the ts of each "admitted" push message (the
	// admission batch's server time) to its receipt. PushAdmitted counts users admitted by a
	// push message; PushFallbacks counts sockets that could not be opened, or closed, failed or
	// went silent before a final message (the user then polled once and opened a new one);
	// PushSilent those of them closed for silence (Config.PushSilence).
	PushLatencyMS *Latency `json:"push_latency_ms,omitempty"`
	PushAdmitted  int64    `json:"push_admitted,omitempty"`
	PushFallbacks int64    `json:"push_fallbacks,omitempty"`
	PushSilent    int64    `json:"push_silent,omitempty"`

	// ChallengesSolved counts the proof-of-work challenges the users solved (an event with
	// "challenge": {"type": "pow"}); SolveMS is the wall time each took, as on a phone.
	ChallengesSolved int64    `json:"challenges_solved,omitempty"`
	SolveMS          *Latency `json:"solve_ms,omitempty"`
	// Presolved counts the challenges of ChallengesSolved solved before the run started
	// (Config.Presolve); the others were solved on the clock.
	Presolved int64 `json:"presolved,omitempty"`

	// MaxActiveSeen is the most users holding an admission at once (from receiving ADMITTED to
	// just before sending the DELETE, or the booking that ends the session); MaxActive is the
	// event's max_active for comparison. Above it is a failure (Problems).
	MaxActiveSeen int64 `json:"max_active_seen"`
	MaxActive     int64 `json:"max_active"`

	// Processes is the number of processes the users ran in (--procs; omitted for one).
	Processes int `json:"processes,omitempty"`
	// Histograms are the latency histograms of a process of a --procs run, for its parent to
	// merge (procs.go); omitted otherwise.
	Histograms map[string]*hdrhistogram.Snapshot `json:"histograms,omitempty"`

	// Book is the --book mode's report (book.go).
	Book *BookReport `json:"book,omitempty"`
	// Bots is what the bots got (bots.go); Healthz what the health probe saw (probe.go).
	Bots    *BotReport    `json:"bots,omitempty"`
	Healthz *HealthReport `json:"healthz,omitempty"`
}

// Latency summarises a latency histogram, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// AdmissionTime summarises the times to admission, in seconds.
type AdmissionTime struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// FIFOExample is one answer that broke the order of the line.
type FIFOExample struct {
	// Kind is "admitted_above_serving" or "queued_at_or_below_serving_seen".
	Kind     string `json:"kind"`
	Target   string `json:"target"`
	TicketID string `json:"ticket_id"`
	Status   string `json:"status"`
	Number   int64  `json:"number"`
	Serving  int64  `json:"serving"`
	// MaxServingAtSend is the highest serving seen before the request was sent.
	MaxServingAtSend int64 `json:"max_serving_at_send"`
}

const maxFIFOExamples = 10

type fifoLog struct {
	count    int64
	examples []FIFOExample
}

// Problems lists what makes the run a failure: users lost, FIFO violations, more users holding
// an admission at once than max_active (as they saw it, a lower bound of the server's), any 5xx, users
// that gave up after errors, bots that got more than the limits allow, a failed or (with
// --healthz-max) slow /healthz. Empty means success.
func (r Report) Problems() []string {
	var p []string
	if r.Lost > 0 {
		p = append(p, fmt.Sprintf("%d users lost", r.Lost))
	}
	if r.FIFOViolations > 0 {
		p = append(p, fmt.Sprintf("%d FIFO violations", r.FIFOViolations))
	}
	if r.MaxActive > 0 && r.MaxActiveSeen > r.MaxActive {
		p = append(p, fmt.Sprintf("%d users held an admission at once (max_active %d)", r.MaxActiveSeen, r.MaxActive))
	}
	if n := r.ServerErrors(); n > 0 {
		p = append(p, fmt.Sprintf("%d 5xx answers", n))
	}
	if r.Failed > 0 {
		p = append(p, fmt.Sprintf("%d users failed", r.Failed))
	}
	if r.Book != nil {
		p = append(p, r.Book.problems()...)
	}
	if r.Bots != nil && len(r.Bots.Over) > 0 {
		p = append(p, "bots got more than the limits allow: "+strings.Join(r.Bots.Over, ", "))
	}
	if r.Healthz != nil {
		p = append(p, r.Healthz.problems()...)
	}
	return p
}

// ServerErrors is the number of 5xx answers in Errors.
func (r Report) ServerErrors() int64 {
	var n int64
	for k, v := range r.Errors {
		if len(k) == 3 && k[0] == '5' {
			n += v
		}
	}
	return n
}

// histogram is an HDR histogram shared by all users, plus the exact maximum.
type histogram struct {
	mu   sync.Mutex
	h    *hdrhistogram.Histogram
	high int64
	max  int64
}

func newHistogram(high int64) *histogram {
	return &histogram{h: hdrhistogram.New(1, high, 3), high: high}
}

func (h *histogram) record(v int64) {
	v = min(max(v, 1), h.high)
	h.mu.Lock()
	_ = h.h.RecordValue(v) // in range by construction
	h.max = max(h.max, v)
	h.mu.Unlock()
}

// quantiles returns count, p50, p99, p99.9 and max, divided by unit.
func (h *histogram) quantiles(unit float64) (n int64, p50, p99, p999, mx float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.h.ValueAtPercentiles([]float64{50, 99, 99.9})
	// The histogram answers the highest value equivalent to a bucket; never above the exact max.
	at := func(p float64) float64 { return float64(min(q[p], h.max)) / unit }
	return h.h.TotalCount(), at(50), at(99), at(99.9), float64(h.max) / unit
}

// percentile returns the p-th percentile, divided by unit.
func (h *histogram) percentile(p, unit float64) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return float64(min(h.h.ValueAtQuantile(p), h.max)) / unit
}

func (h *histogram) latency() Latency {
	var l Latency
	l.Count, l.P50, l.P99, l.P999, l.Max = h.quantiles(1000) // µs -> ms
	return l
}

// report collects the counters once every user has stopped.
func (r *runner) report() Report {
	rep := Report{
		Event:     r.cfg.Event,
		Targets:   slices.Clone(r.cfg.Targets),
		Users:     r.cfg.Users,
		DurationS: r.end.Sub(r.start).Seconds(),
		Requests:  r.requests.Load(),
		Joined:    r.joined.Load(),

		JoinLatencyMS:   r.joinLatency.latency(),
		StatusLatencyMS: r.statusLatency.latency(),

		Admitted:      r.admitted.Load(),
		Left:          r.left.Load(),
		Failed:        r.failed.Load(),
		Failovers:     r.failovers.Load(),
		Rejoins:       r.rejoins.Load(),
		MaxActiveSeen: r.maxActiveSeen.Load(),
		MaxActive:     r.maxActive,
	}
	if first, last := r.firstJoinSent.Load(), r.lastJoinDone.Load(); first != 0 && last > first {
		rep.JoinsPerS = float64(rep.Joined) / time.Duration(last-first).Seconds()
	}
	if r.cfg.Push {
		l := r.pushLatency.latency()
		rep.PushLatencyMS = &l
		rep.PushAdmitted, rep.PushFallbacks, rep.PushSilent = r.pushAdmitted.Load(), r.pushFallbacks.Load(), r.pushSilent.Load()
	}
	if l := r.solveTime.latency(); l.Count > 0 {
		rep.ChallengesSolved, rep.SolveMS = l.Count, &l
		rep.Presolved = r.presolved
	}
	_, p50, p99, _, mx := r.admission.quantiles(1000) // ms -> s
	rep.TimeToAdmissionS = AdmissionTime{P50: p50, P90: r.admission.percentile(90, 1000), P99: p99, Max: mx}

	r.mu.Lock()
	rep.Errors = maps.Clone(r.errors)
	rep.Terminal = maps.Clone(r.terminal)
	rep.FIFOViolations = r.fifo.count
	rep.FIFOExamples = append([]FIFOExample{}, r.fifo.examples...)
	r.mu.Unlock()

	var terminal int64
	for _, n := range rep.Terminal {
		terminal += n
	}
	rep.Lost = max(int64(rep.Users)-rep.Admitted-terminal-rep.Failed, 0)
	return rep
}

// writeSummary prints the report for people.
func (r Report) writeSummary(w io.Writer) {
	deadline := ""
	if r.DeadlineReached {
		deadline = " (stopped by the deadline)"
	}
	procs := ""
	if r.Processes > 1 {
		procs = fmt.Sprintf(" in %d processes", r.Processes)
	}
	fmt.Fprintf(w, "crowd: event %q, %d users%s on %d target(s), %.2fs%s\n", r.Event, r.Users, procs, len(r.Targets), r.DurationS, deadline)
	fmt.Fprintf(w, "  joins       %d ok, %.1f/s; latency p50 %s  p99 %s  p99.9 %s  max %s\n",
		r.Joined, r.JoinsPerS, ms(r.JoinLatencyMS.P50), ms(r.JoinLatencyMS.P99), ms(r.JoinLatencyMS.P999), ms(r.JoinLatencyMS.Max))
	if r.StatusLatencyMS.Count > 0 {
		fmt.Fprintf(w, "  status      %d polls; latency p50 %s  p99 %s  p99.9 %s  max %s\n",
			r.StatusLatencyMS.Count, ms(r.StatusLatencyMS.P50), ms(r.StatusLatencyMS.P99), ms(r.StatusLatencyMS.P999), ms(r.StatusLatencyMS.Max))
	} else {
		fmt.Fprintf(w, "  status      no polls\n")
	}
	fmt.Fprintf(w, "  admitted    %d (left %d); time to admission p50 %.2fs  p90 %.2fs  p99 %.2fs  max %.2fs\n",
		r.Admitted, r.Left, r.TimeToAdmissionS.P50, r.TimeToAdmissionS.P90, r.TimeToAdmissionS.P99, r.TimeToAdmissionS.Max)
	if l := r.PushLatencyMS; l != nil {
		fmt.Fprintf(w, "  push        %d admitted by push, %d sockets failed (%d silent); latency p50 %s  p99 %s  p99.9 %s  max %s\n",
			r.PushAdmitted, r.PushFallbacks, r.PushSilent, ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max))
	}
	if l := r.SolveMS; l != nil {
		fmt.Fprintf(w, "  challenges  %d solved (%d before the start); time p50 %s  p99 %s  max %s\n", r.ChallengesSolved, r.Presolved, ms(l.P50), ms(l.P99), ms(l.Max))
	}
	fmt.Fprintf(w, "  terminal    %s\n", counts(r.Terminal))
	fmt.Fprintf(w, "  lost        %d   failed %d\n", r.Lost, r.Failed)
	fmt.Fprintf(w, "  requests    %d; errors %s; failovers %d, rejoins %d\n", r.Requests, counts(r.Errors), r.Failovers, r.Rejoins)
	fmt.Fprintf(w, "  fifo        %d violations\n", r.FIFOViolations)
	for _, ex := range r.FIFOExamples {
		fmt.Fprintf(w, "    %s: ticket %s number %d status %s serving %d (max serving seen at send %d) via %s\n",
			ex.Kind, ex.TicketID, ex.Number, ex.Status, ex.Serving, ex.MaxServingAtSend, ex.Target)
	}
	fmt.Fprintf(w, "  active      max seen %d (event max_active %d)\n", r.MaxActiveSeen, r.MaxActive)
	if r.Book != nil {
		r.Book.writeSummary(w)
	}
	if r.Bots != nil {
		r.Bots.writeSummary(w)
	}
	if r.Healthz != nil {
		r.Healthz.writeSummary(w)
	}
	if p := r.Problems(); len(p) > 0 {
		fmt.Fprintf(w, "  FAILED: %s\n", strings.Join(p, ", "))
	} else {
		fmt.Fprintf(w, "  OK\n")
	}
}

func ms(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}

func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
