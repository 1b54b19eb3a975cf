package history

import (
	"math"
	"sort"
	"time"

	"github.com/waitroom/waitroom/internal/event"
)

// MinEvents is how many events (admissions, joins, units sold) a rate's window must hold to be
// read over it; fewer, and the next longer window of RateWindows is tried. Ten events put the
// rate within about a third of the truth (Poisson: 1/sqrt(10)), and a steady trickle keeps its
// rate between two admissions instead of falling to zero.
const MinEvents = 10

// RateWindows are the trailing windows a rate is read over, shortest first. 0 is one interval
// (the last two samples): busy lines get the freshest figure.
var RateWindows = []time.Duration{0, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour}

// Rate is a rate per second and the trailing window it was read over (0: no rate, fewer than
// two samples).
type Rate struct {
	PerS   float64
	Window time.Duration
}

// unwrap turns running totals into a non-decreasing series: a decrease is a reset (a new
// line generation, counters that expired), after which the total counts from 0 again.
func unwrap(v []int64) []float64 {
	out := make([]float64, len(v))
	for i := 1; i < len(v); i++ {
		d := v[i] - v[i-1]
		if d < 0 {
			d = v[i]
		}
		out[i] = out[i-1] + float64(d)
	}
	return out
}

// Unwrap is the running totals v as a non-decreasing series counted from 0 before v[0] (v[0]
// itself counts): a total that falls is a reset (a new line generation, counters that
// expired), after which it counts from 0 again. The report after the sale reads its totals so.
func Unwrap(v []int64) []float64 {
	return unwrap(append([]int64{0}, v...))[1:]
}

// trailing reads the rate of series m at sample i: over the shortest window of RateWindows
// ending at i in which m moved by at least MinEvents (either way: m may be a gauge such as
// units sold, which cancellations lower), else over all the samples up to i.
func trailing(at []time.Time, m []float64, i int) Rate {
	if i <= 0 || i >= len(at) {
		return Rate{}
	}
	var r Rate
	for _, w := range RateWindows {
		j := i - 1
		if w > 0 {
			cut := at[i].Add(-w)
			j = max(0, sort.Search(i, func(k int) bool { return at[k].After(cut) })-1)
		}
		span := at[i].Sub(at[j])
		if span <= 0 {
			continue
		}
		d := m[i] - m[j]
		r = Rate{PerS: d / span.Seconds(), Window: span}
		if math.Abs(d) >= MinEvents || j == 0 {
			return r
		}
	}
	return r
}

// step is the rate of the running total m over the interval ending at sample i (0 at i = 0).
func step(at []time.Time, m []float64, i int) float64 {
	if i <= 0 || !at[i].After(at[i-1]) {
		return 0
	}
	return (m[i] - m[i-1]) / at[i].Sub(at[i-1]).Seconds()
}

// EventRates are the rates of an event at one sample.
type EventRates struct {
	// Admissions and Joins (tickets given out) per second, read over trailing windows
	// (trailing: MinEvents, RateWindows).
	Admissions, Joins Rate
	// Sales is the units sold per second, net of cancellations, read likewise.
	Sales Rate
	// Rejected and Unavailable are the answers 429 and 503 per second over the interval ending
	// at the sample (bursts show as they came).
	Rejected, Unavailable float64
}

// Rates returns the rates of every sample of an event's series (ascending by At).
func Rates(s []EventSample) []EventRates {
	n := len(s)
	at := make([]time.Time, n)
	adm, joins, sold, rej, unav := make([]int64, n), GivenOut(s), make([]float64, n), make([]int64, n), make([]int64, n)
	for i, x := range s {
		at[i], adm[i], sold[i], rej[i], unav[i] = x.At, x.AdmittedTotal, float64(x.Sold), x.Rejected, x.Unavailable
	}
	ma, mj, mr, mu := unwrap(adm), unwrap(joins), unwrap(rej), unwrap(unav)
	out := make([]EventRates, n)
	for i := range s {
		out[i] = EventRates{Admissions: trailing(at, ma, i), Joins: trailing(at, mj, i), Sales: trailing(at, sold, i),
			Rejected: step(at, mr, i), Unavailable: step(at, mu, i)}
	}
	return out
}

// EventForecast is what the last sample of an event says about what comes.
type EventForecast struct {
	Admissions, Joins Rate
	// ClearS is how long the line takes to empty at the admission rate if nobody else joined:
	// the wait event.ETA tells the last person in line (so never slower than a full house's
	// turnover, never faster than admit_rate). 0 when nobody waits; -1 when it cannot be
	// told: paused, closed, or no rate.
	ClearS int64
	// The sale (ForSale false: the event sells nothing): units left (capacity - sold), the
	// net sales rate, and SellOutS, the seconds until the units left are sold at that rate (0
	// when none are left; -1 when nothing sells).
	ForSale   bool
	UnitsLeft int64
	Sales     Rate
	SellOutS  int64
}

// ForecastEvent reads the forecast of e from its samples (ascending) and their Rates. The
// zero forecast (ClearS and SellOutS -1) when there is no sample.
func ForecastEvent(e event.Event, s []EventSample, r []EventRates) EventForecast {
	f := EventForecast{ClearS: -1, SellOutS: -1, ForSale: e.ForSale()}
	if len(s) == 0 || len(r) != len(s) {
		return f
	}
	last, rate := s[len(s)-1], r[len(r)-1]
	f.Admissions, f.Joins, f.Sales = rate.Admissions, rate.Joins, rate.Sales
	switch {
	case last.Waiting == 0:
		f.ClearS = 0
	case last.Paused || e.Paused || e.State(last.At) == "closed":
	default:
		f.ClearS = e.ETA(last.Waiting, last.Serving, rate.Admissions.PerS, last.At)
	}
	if f.ForSale {
		f.UnitsLeft = max(0, last.Capacity-last.Sold)
		f.SellOutS = until(f.UnitsLeft, rate.Sales)
	}
	return f
}

// until is how long it takes to use up left at rate r, in whole seconds: 0 when nothing is
// left, -1 when r does not use anything up.
func until(left int64, r Rate) int64 {
	switch {
	case left <= 0:
		return 0
	case r.PerS > 0:
		return int64(math.Ceil(float64(left) / r.PerS))
	}
	return -1
}

// CampaignRates are the rates of a coupon campaign at one sample: entries and coupons issued
// per second, read over trailing windows.
type CampaignRates struct {
	Entries, Issued Rate
}

// RatesOfCampaign returns the rates of every sample of a campaign's series (ascending by At).
func RatesOfCampaign(s []CampaignSample) []CampaignRates {
	n := len(s)
	at := make([]time.Time, n)
	ent, iss := make([]int64, n), make([]int64, n)
	for i, x := range s {
		at[i], ent[i], iss[i] = x.At, x.Entries, x.Issued
	}
	me, mi := unwrap(ent), unwrap(iss)
	out := make([]CampaignRates, n)
	for i := range s {
		out[i] = CampaignRates{Entries: trailing(at, me, i), Issued: trailing(at, mi, i)}
	}
	return out
}

// CampaignForecast is what the last sample of a campaign says: the stock not yet claimed by an
// entry (every entry within the stock gets a coupon; those beyond are rejected at once), and
// StockOutS, the seconds until entries claim it at the entry rate (0 when none is left; -1
// when nobody enters).
type CampaignForecast struct {
	Entries, Issued Rate
	StockLeft       int64
	StockOutS       int64
}

// ForecastCampaign reads the forecast from a campaign's samples (ascending) and their rates.
func ForecastCampaign(s []CampaignSample, r []CampaignRates) CampaignForecast {
	f := CampaignForecast{StockOutS: -1}
	if len(s) == 0 || len(r) != len(s) {
		return f
	}
	last, rate := s[len(s)-1], r[len(r)-1]
	f.Entries, f.Issued = rate.Entries, rate.Issued
	f.StockLeft = max(0, last.Stock-last.Entries)
	f.StockOutS = until(f.StockLeft, rate.Entries)
	return f
}

// Clock is an event's number clock: checkpoints of one generation, ascending by At (and so by
// LastNumber: numbers are given out in the store's order).
type Clock []Checkpoint

// NewClock merges checkpoints (from the event series and the clock series, in any order) into
// the clock of generation gen.
func NewClock(gen uint32, cps ...[]Checkpoint) Clock {
	var c Clock
	for _, l := range cps {
		for _, p := range l {
			if p.Generation == gen {
				c = append(c, p)
			}
		}
	}
	sort.Slice(c, func(i, j int) bool {
		if !c[i].At.Equal(c[j].At) {
			return c[i].At.Before(c[j].At)
		}
		return c[i].LastNumber < c[j].LastNumber
	})
	return c
}

// JoinTime estimates when ticket number n joined: between the last checkpoint before it was
// given out and the first one after, linearly (joins spread evenly over the interval); after
// the last checkpoint, half-way to now. The error is at most one interval between checkpoints
// (the event series' Interval within its window, the clock series' step beyond). A number
// older than every checkpoint gets the first one's time (a wait too short, never too long);
// ok is false without checkpoints.
func (c Clock) JoinTime(n int64, now time.Time) (time.Time, bool) {
	if len(c) == 0 {
		return time.Time{}, false
	}
	i := sort.Search(len(c), func(k int) bool { return c[k].LastNumber >= n })
	switch {
	case i == 0:
		return c[0].At, true
	case i == len(c):
		last := c[len(c)-1].At
		if now.Before(last) {
			return last, true
		}
		return last.Add(now.Sub(last) / 2), true
	}
	lo, hi := c[i-1], c[i]
	frac := float64(n-lo.LastNumber) / float64(hi.LastNumber-lo.LastNumber)
	return lo.At.Add(time.Duration(frac * float64(hi.At.Sub(lo.At)))), true
}

// Waits estimates the time in queue of the admitted tickets of one admission step that moved
// the serving counter over from..to at now: admitted numbers spread evenly over the range
// (those that left inside it are not known one by one), each waiting from its JoinTime to now.
// Nil when the clock is empty.
func (c Clock) Waits(from, to, admitted int64, now time.Time) []time.Duration {
	if len(c) == 0 || admitted <= 0 || to < from {
		return nil
	}
	out := make([]time.Duration, 0, admitted)
	span := float64(to - from)
	for k := range admitted {
		n := from
		if admitted > 1 {
			n = from + int64(math.Round(span*float64(k)/float64(admitted-1)))
		}
		at, _ := c.JoinTime(n, now)
		out = append(out, max(0, now.Sub(at)))
	}
	return out
}
