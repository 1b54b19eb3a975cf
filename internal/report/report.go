// Package report makes the report after an event's sale (issue 21, item 9) from its history
// (package history): arrivals over time, the time in line measured, abandonment, the sell-out
// time and the refusals, as figures (Report, JSON), a page (HTML) and a table (CSV). It reads
// and computes; it stores nothing. The figures are the history's:
//
//   - arrivals are tickets given out (joins that took a place: the line's last ticket number,
//     less the numbers a resume after a store loss skipped that nobody showed up with,
//     history.GivenOut),
//     admissions the line's admitted total, abandonment its tickets that left while waiting
//     and its admissions that lapsed unclaimed — running totals read as differences, a total
//     that falls counting as a reset (history.Unwrap);
//   - the time in line is each admission's measured wait, summed over the fleet in buckets
//     about 9 % wide (history.Waits): percentiles within 5 %;
//   - times (the first arrival, the sell-out) are read between the two samples around them,
//     linearly: within one sampling interval (5 s) in the store's hour, one minute or ten
//     minutes beyond it (the long history).
package report

import (
	"math"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
)

// Input is what a report is made of (package recorder gathers it).
type Input struct {
	Event event.Event
	Now   time.Time // when the report is made
	// Points are the event's samples over its life, oldest first: the long history's (a
	// bucket's last sample) before the store's window, the window's within it.
	Points []history.EventSample
	// Span is the timeline's step, and Buckets the long history at it (their waits give each
	// step's time in line; nil: none kept).
	Span    time.Duration
	Buckets []history.Bucket
	// Waits and Refusals are what was measured of the event's life (history.LifeSeries).
	Waits    history.Waits
	Refusals [4]int64
}

// TimeInLine is the measured time in line of a set of admissions.
type TimeInLine struct {
	Count int64    `json:"count"`
	P50S  *float64 `json:"p50_s"` // null without admissions
	P90S  *float64 `json:"p90_s"`
}

// Row is one step of the timeline (Input.Span long, from Start): what happened in it.
type Row struct {
	Start       time.Time        `json:"start"`
	Arrivals    int64            `json:"arrivals"`
	Admitted    int64            `json:"admitted"`
	LeftWaiting int64            `json:"left_waiting"`
	Unclaimed   int64            `json:"unclaimed"`
	WaitingMax  int64            `json:"waiting_max"`  // the longest line seen in it
	Sold        int64            `json:"sold"`         // units sold at its end
	TimeInLine  *TimeInLine      `json:"time_in_line"` // null when the long history has no bucket of it
	Refusals    map[string]int64 `json:"refusals"`
}

// Report is what happened in an event's life, as of MadeAt.
type Report struct {
	EventID string    `json:"event_id"`
	Name    string    `json:"name"`
	MadeAt  time.Time `json:"made_at"`
	// From and To are the first and last samples read; SpanS the timeline's step (s).
	From  *time.Time `json:"from"`
	To    *time.Time `json:"to"`
	SpanS int64      `json:"span_s"`
	// Arrivals are the tickets given out; FirstArrival when the first was (null: none, or
	// before the first sample and more than a step after the event's creation: unknown).
	Arrivals     int64      `json:"arrivals"`
	FirstArrival *time.Time `json:"first_arrival"`
	Admitted     int64      `json:"admitted"`
	// LeftWaiting left the line while waiting; Unclaimed were admitted and never came (their
	// admission lapsed unclaimed: gone before their turn). Abandonment is both, over the
	// arrivals (null without arrivals).
	LeftWaiting int64      `json:"left_waiting"`
	Unclaimed   int64      `json:"unclaimed"`
	Abandonment *float64   `json:"abandonment"`
	TimeInLine  TimeInLine `json:"time_in_line"`
	PeakWaiting int64      `json:"peak_waiting"`
	// The sale: Capacity null when the event sells nothing; SoldOutAt when the last unit
	// sold, and SellOutS the seconds from the first arrival to it (null: not sold out).
	Capacity  *int64     `json:"capacity"`
	Sold      int64      `json:"sold"`
	SoldOut   bool       `json:"sold_out"`
	SoldOutAt *time.Time `json:"sold_out_at"`
	SellOutS  *float64   `json:"sell_out_s"`
	// Refusals of the line's rules by kind (history.RefusalKinds); Rejected and Unavailable
	// the answers 429 and 503 on the event's routes.
	Refusals    map[string]int64 `json:"refusals"`
	Rejected    int64            `json:"rejected"`
	Unavailable int64            `json:"unavailable"`
	Timeline    []Row            `json:"timeline"`
}

// timeInLine summarises waits.
// lifeWaits is the waits of the event's life: the long history's (each bucket holds the life's
// waits at its end) as differences, with in.Waits' since the last bucket. It is in.Waits
// itself unless the counts started again (the embedded instance killed, Redis restarted
// empty), when in.Waits holds only what was measured since, and the report's total read less
// than its timeline's rows (helper-82: 0 admissions timed against 2 in the rows). Waits whose
// count fell started again: they count whole.
func lifeWaits(in Input) history.Waits {
	if len(in.Buckets) == 0 {
		return in.Waits
	}
	total, prev := history.Waits{}, history.Waits(nil)
	since := func(w history.Waits) {
		if w.Count() < prev.Count() {
			total.Add(w)
		} else {
			total.Add(w.Sub(prev))
		}
		prev = w
	}
	for _, b := range in.Buckets {
		since(b.Waits)
	}
	since(in.Waits)
	return total
}

func timeInLine(w history.Waits) TimeInLine {
	out := TimeInLine{Count: w.Count()}
	q := func(p float64) *float64 {
		d, ok := w.Quantile(p)
		if !ok {
			return nil
		}
		s := math.Round(d.Seconds()*100) / 100
		return &s
	}
	out.P50S, out.P90S = q(0.5), q(0.9)
	return out
}

func refusals(r [4]int64) map[string]int64 {
	m := make(map[string]int64, len(history.RefusalKinds))
	for i, k := range history.RefusalKinds {
		m[k] = r[i]
	}
	return m
}

// Make computes the report of in.
func Make(in Input) Report {
	e, p := in.Event, in.Points
	r := Report{EventID: e.ID, Name: e.Name, MadeAt: in.Now.UTC(), SpanS: int64(in.Span / time.Second),
		TimeInLine: timeInLine(lifeWaits(in)), Refusals: refusals(in.Refusals), Timeline: []Row{}}
	if e.ForSale() {
		c := e.Capacity
		r.Capacity = &c
	}
	if len(p) == 0 {
		return r
	}
	from, to := p[0].At, p[len(p)-1].At
	r.From, r.To = &from, &to
	col := func(get func(history.EventSample) int64) []float64 {
		v := make([]int64, len(p))
		for i, s := range p {
			v[i] = get(s)
		}
		return history.Unwrap(v)
	}
	arrivals := history.Unwrap(history.GivenOut(p)) // a resume's void numbers are nobody's arrival
	admitted := col(func(s history.EventSample) int64 { return s.AdmittedTotal })
	left := col(func(s history.EventSample) int64 { return s.LeftWaiting })
	unclaimed := col(func(s history.EventSample) int64 { return s.Unclaimed })
	rejected := col(func(s history.EventSample) int64 { return s.Rejected })
	unavailable := col(func(s history.EventSample) int64 { return s.Unavailable })
	var refused [4][]float64
	for k := range refused {
		refused[k] = col(func(s history.EventSample) int64 { return s.Refusals[k] })
	}
	n := len(p) - 1
	r.Arrivals, r.Admitted = int64(arrivals[n]), int64(admitted[n])
	r.LeftWaiting, r.Unclaimed = int64(left[n]), int64(unclaimed[n])
	r.Rejected, r.Unavailable = int64(rejected[n]), int64(unavailable[n])
	if r.Arrivals > 0 {
		a := math.Round(float64(r.LeftWaiting+r.Unclaimed)/float64(r.Arrivals)*1000) / 1000
		r.Abandonment = &a
	}
	last := p[n]
	r.Sold, r.SoldOut = last.Sold, last.SoldOut
	r.FirstArrival = firstArrival(p, arrivals, e.CreatedAt, in.Span)
	r.SoldOutAt = soldOutAt(p)
	if r.SoldOutAt != nil {
		r.SoldOut = true
		if r.FirstArrival != nil {
			s := math.Round(r.SoldOutAt.Sub(*r.FirstArrival).Seconds()*100) / 100
			r.SellOutS = &s
		}
	}
	r.Timeline = timeline(in, arrivals, admitted, left, unclaimed, refused)
	for _, row := range r.Timeline {
		r.PeakWaiting = max(r.PeakWaiting, row.WaitingMax)
	}
	return r
}

// firstArrival is when the first ticket was given out: between the last sample before any
// arrival and the first after, linearly by the tickets given out; the first sample's time
// when it already had some (the sampling started later: too late, never too early); nil
// without arrivals.
func firstArrival(p []history.EventSample, arrivals []float64, created time.Time, span time.Duration) *time.Time {
	for i := range p {
		if arrivals[i] < 1 {
			continue
		}
		t := p[i].At
		switch {
		case i > 0:
			t = between(p[i-1].At, p[i].At, arrivals[i-1], arrivals[i], 1)
		case created.IsZero() || created.After(t) || t.Sub(created) > span:
			// The first sample counts arrivals already, and its time says nothing of the
			// first one's (a history that started after them: an instance restarted, the
			// history's window passed).
			return nil
		default:
			// The event's creation stands for a sample of no arrivals a step or less before.
			t = between(created, t, 0, arrivals[i], 1)
		}
		return &t
	}
	return nil
}

// soldOutAt is when the last unit sold: in the interval before the first sample sold out
// (its flag, or sold at capacity), when the units left then sold at the rate of the interval
// before it (sales stop at the capacity, so the sample itself cannot say when they reached
// it), else half-way; the first sample's time when it is the first; nil when none is.
func soldOutAt(p []history.EventSample) *time.Time {
	for i, s := range p {
		if !s.SoldOut && (s.Capacity == 0 || s.Sold < s.Capacity) {
			continue
		}
		t := s.At
		if i > 0 {
			prev := p[i-1]
			t = prev.At.Add(s.At.Sub(prev.At) / 2)
			if i > 1 && prev.Sold > p[i-2].Sold && s.Capacity > prev.Sold && prev.At.After(p[i-2].At) {
				rate := float64(prev.Sold-p[i-2].Sold) / prev.At.Sub(p[i-2].At).Seconds()
				left := time.Duration(float64(s.Capacity-prev.Sold) / rate * float64(time.Second))
				t = prev.At.Add(min(left, s.At.Sub(prev.At)))
			}
		}
		t = t.UTC()
		return &t
	}
	return nil
}

// between is the time between t0 (value v0) and t1 (v1) when the value reached v, linearly.
func between(t0, t1 time.Time, v0, v1, v float64) time.Time {
	if v1 <= v0 {
		return t1
	}
	f := min(1, max(0, (v-v0)/(v1-v0)))
	return t0.Add(time.Duration(f * float64(t1.Sub(t0)))).UTC()
}

// timeline makes a row per step of in.Span holding samples: what its samples' totals moved by
// since the step before, its longest line (the samples', and its bucket's), the units sold at
// its end, and the time in line of the admissions in it (its bucket's waits less the bucket's
// before).
func timeline(in Input, arrivals, admitted, left, unclaimed []float64, refused [4][]float64) []Row {
	p := in.Points
	span := in.Span
	if span <= 0 {
		span = history.MinuteSpan
	}
	buckets := make(map[time.Time]history.Bucket, len(in.Buckets))
	for _, b := range in.Buckets {
		buckets[b.Start] = b
	}
	var rows []Row
	var prevEnd int // index of the last sample of the previous row (-1: none)
	prevEnd = -1
	var prevWaits history.Waits
	for i := 0; i < len(p); {
		start := history.SpanStart(p[i].At, span)
		j := i
		waitingMax := int64(0)
		for j < len(p) && history.SpanStart(p[j].At, span).Equal(start) {
			waitingMax = max(waitingMax, p[j].Waiting)
			j++
		}
		end := j - 1
		at := func(v []float64) int64 {
			if prevEnd < 0 {
				return int64(v[end])
			}
			return int64(v[end] - v[prevEnd])
		}
		row := Row{Start: start, Arrivals: at(arrivals), Admitted: at(admitted), LeftWaiting: at(left), Unclaimed: at(unclaimed),
			WaitingMax: waitingMax, Sold: p[end].Sold, Refusals: map[string]int64{}}
		for k, kind := range history.RefusalKinds {
			row.Refusals[kind] = at(refused[k])
		}
		if b, ok := buckets[start]; ok {
			row.WaitingMax = max(row.WaitingMax, b.WaitingMax)
			w := b.Waits
			if prevWaits != nil {
				w = b.Waits.Sub(prevWaits)
			}
			til := timeInLine(w)
			row.TimeInLine = &til
			prevWaits = b.Waits
		}
		rows = append(rows, row)
		prevEnd, i = end, j
	}
	return rows
}
