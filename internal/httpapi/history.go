package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/recorder"
)

// eventSampleJSON is one sample of GET /v1/events/{event_id}/history.
type eventSampleJSON struct {
	At            time.Time `json:"at"`
	Generation    uint32    `json:"generation"`
	Waiting       int64     `json:"waiting"`
	WaitingMax    int64     `json:"waiting_max"` // the longest line of the span (resolution_s), else waiting
	Active        int64     `json:"active"`
	MaxActive     int64     `json:"max_active"`
	Serving       int64     `json:"serving"`
	AdmittedTotal int64     `json:"admitted_total"`
	LastNumber    int64     `json:"last_number"`
	Paused        bool      `json:"paused"`
	Capacity      *int64    `json:"capacity"` // null: the event sells nothing
	Sold          int64     `json:"sold"`
	Held          int64     `json:"held"`
	// The fleet's running totals of answers 429 and 503 on the event's routes.
	RejectedTotal    int64 `json:"rejected_total"`
	UnavailableTotal int64 `json:"unavailable_total"`
	// Rates per second (history.EventRates).
	AdmissionsPerS  float64 `json:"admissions_per_s"`
	JoinsPerS       float64 `json:"joins_per_s"`
	SalesPerS       float64 `json:"sales_per_s"`
	RejectedPerS    float64 `json:"rejected_per_s"`
	UnavailablePerS float64 `json:"unavailable_per_s"`
	// The line's running totals of tickets that left while waiting and of admissions that
	// lapsed unclaimed, its sold-out flag, and the fleet's refusals of this life of the event
	// by kind (history.RefusalKinds).
	LeftWaitingTotal int64            `json:"left_waiting_total"`
	UnclaimedTotal   int64            `json:"unclaimed_total"`
	SoldOut          bool             `json:"sold_out"`
	RefusalsTotal    map[string]int64 `json:"refusals_total"`
}

// refusalsJSON is a count of refusals by kind, every kind present.
func refusalsJSON(r [4]int64) map[string]int64 {
	m := make(map[string]int64, len(history.RefusalKinds))
	for i, k := range history.RefusalKinds {
		m[k] = r[i]
	}
	return m
}

// timeInLineJSON is the measured time in line of admissions: how many were measured, and the
// median and 90th percentile in seconds (null without any).
type timeInLineJSON struct {
	Count int64    `json:"count"`
	P50S  *float64 `json:"p50_s"`
	P90S  *float64 `json:"p90_s"`
}

func timeInLine(w history.Waits) timeInLineJSON {
	out := timeInLineJSON{Count: w.Count()}
	q := func(p float64) *float64 {
		d, ok := w.Quantile(p)
		if !ok {
			return nil
		}
		s := math.Round(d.Seconds()*10) / 10
		return &s
	}
	out.P50S, out.P90S = q(0.5), q(0.9)
	return out
}

// measuredJSON is what was measured of the event's life (not estimated): the time in line of
// its admissions (the waits of waitroom_time_in_queue_seconds, summed over the fleet), the
// line's totals of abandonment as of the last sample, and the refusals by kind.
type measuredJSON struct {
	TimeInLine  timeInLineJSON   `json:"time_in_line"`
	LeftWaiting int64            `json:"left_waiting"`
	Unclaimed   int64            `json:"unclaimed"`
	Refusals    map[string]int64 `json:"refusals"`
}

// saleForecastJSON is the sale's part of an event's forecast.
type saleForecastJSON struct {
	UnitsLeft        int64   `json:"units_left"`
	SalesRate        float64 `json:"sales_rate"`
	SalesRateWindowS float64 `json:"sales_rate_window_s"`
	SellOutS         *int64  `json:"sell_out_s"` // null: nothing sells
}

// eventForecastJSON is history.EventForecast.
type eventForecastJSON struct {
	AdmissionRate        float64           `json:"admission_rate"`
	AdmissionRateWindowS float64           `json:"admission_rate_window_s"`
	JoinRate             float64           `json:"join_rate"`
	JoinRateWindowS      float64           `json:"join_rate_window_s"`
	ClearS               *int64            `json:"clear_s"` // null: paused, closed, or no rate
	Sale                 *saleForecastJSON `json:"sale"`    // null: the event sells nothing
}

// orNull is nil for a negative figure ("cannot tell").
func orNull(v int64) *int64 {
	if v < 0 {
		return nil
	}
	return &v
}

// SinceQuery reads ?since= (an RFC 3339 time; absent: the zero time). It answers 400
// invalid_query and returns false when it is malformed.
func SinceQuery(w http.ResponseWriter, r *http.Request) (time.Time, bool) {
	q, ok := httpjson.Query(w, r, "since")
	if !ok {
		return time.Time{}, false
	}
	v := q.Get("since")
	if v == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "since must be an RFC 3339 time, such as 2026-11-30T12:00:00Z"))
		return time.Time{}, false
	}
	return t, true
}

// resolutionQuery reads ?resolution_s= (absent: 0, the store's window; 60 or 600: the long
// history's spans, history.Spans). It answers 400 invalid_query and returns false otherwise.
func resolutionQuery(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	q, ok := httpjson.Query(w, r, "resolution_s")
	if !ok {
		return 0, false
	}
	v := q.Get("resolution_s")
	if v == "" {
		return 0, true
	}
	for _, s := range history.Spans {
		if v == strconv.Itoa(int(s.Span/time.Second)) {
			return s.Span, true
		}
	}
	httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query",
		"resolution_s must be 60 (a bucket a minute, kept a day) or 600 (ten minutes, kept a month), or left out (the last hour at interval_s)"))
	return 0, false
}

// eventHistory serves GET /v1/events/{event_id}/history (admin): the event's samples of the
// last window (after ?since= when given), with their rates, and the forecast read from them
// (package history; the samples are shared by every instance, see package recorder); with
// ?resolution_s=, the long history kept in SQL instead (a bucket per minute for a day, per ten
// minutes for a month: the last sample of each span, its longest line).
func (a *API) eventHistory(w http.ResponseWriter, r *http.Request, _ Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	since, ok := SinceQuery(w, r)
	if !ok {
		return
	}
	span, ok := resolutionQuery(w, r)
	if !ok {
		return
	}
	e, ok := a.knownEvent(w, r, id)
	if !ok {
		return
	}
	var (
		h      recorder.EventHistory
		maxima []int64
		err    error
	)
	interval, window := a.cfg.History.Interval(), a.cfg.History.Window()
	if span > 0 {
		h, maxima, err = a.cfg.History.LongHistory(r.Context(), e, span, since)
		interval, window = span, history.KeepOf(span)
	} else {
		h, err = a.cfg.History.Event(r.Context(), e, since)
	}
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	samples := make([]eventSampleJSON, len(h.Samples))
	for i, s := range h.Samples {
		rt := h.Rates[i]
		samples[i] = eventSampleJSON{At: s.At, Generation: s.Generation, Waiting: s.Waiting, Active: s.Active, MaxActive: s.MaxActive,
			Serving: s.Serving, AdmittedTotal: s.AdmittedTotal, LastNumber: s.LastNumber, Paused: s.Paused, Sold: s.Sold, Held: s.Held,
			RejectedTotal: s.Rejected, UnavailableTotal: s.Unavailable, AdmissionsPerS: rt.Admissions.PerS, JoinsPerS: rt.Joins.PerS,
			SalesPerS: rt.Sales.PerS, RejectedPerS: rt.Rejected, UnavailablePerS: rt.Unavailable,
			LeftWaitingTotal: s.LeftWaiting, UnclaimedTotal: s.Unclaimed, SoldOut: s.SoldOut, RefusalsTotal: refusalsJSON(s.Refusals),
			WaitingMax: s.Waiting}
		if maxima != nil {
			samples[i].WaitingMax = maxima[i]
		}
		if s.Capacity > 0 {
			samples[i].Capacity = &s.Capacity
		}
	}
	f := h.Forecast
	fj := eventForecastJSON{AdmissionRate: f.Admissions.PerS, AdmissionRateWindowS: f.Admissions.Window.Seconds(),
		JoinRate: f.Joins.PerS, JoinRateWindowS: f.Joins.Window.Seconds(), ClearS: orNull(f.ClearS)}
	if f.ForSale {
		fj.Sale = &saleForecastJSON{UnitsLeft: f.UnitsLeft, SalesRate: f.Sales.PerS, SalesRateWindowS: f.Sales.Window.Seconds(),
			SellOutS: orNull(f.SellOutS)}
	}
	life, err := a.cfg.History.EventLife(r.Context(), e.ID, e.Epoch())
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	m := measuredJSON{TimeInLine: timeInLine(life.Waits), Refusals: refusalsJSON(life.Refusals)}
	if h.Last != nil {
		m.LeftWaiting, m.Unclaimed = h.Last.LeftWaiting, h.Last.Unclaimed
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"event_id": id, "interval_s": interval.Seconds(),
		"window_s": window.Seconds(), "samples": samples, "forecast": fj, "measured": m})
}

// instanceJSON is one instance of GET /v1/instances.
type instanceJSON struct {
	InstanceID string    `json:"instance_id"`
	Name       string    `json:"name"`
	Addr       string    `json:"addr"`
	Version    string    `json:"version"`
	StartedAt  time.Time `json:"started_at"`
	AliveUntil time.Time `json:"alive_until"`
	Sampler    bool      `json:"sampler"`
	Self       bool      `json:"self"`
	// Warnings are what the instance found wrong with its setup (an empty list: nothing).
	Warnings []string `json:"warnings"`
	// TokenKeys are the ids (the JWKS's kids) of its admission-token keys, the signing key's
	// first: every instance must hold every other's signing key.
	TokenKeys []string `json:"token_keys"`
}

// instances serves GET /v1/instances (admin): the instances alive (those whose last heartbeat,
// every history interval, has not run out), as of this instance's last heartbeat.
func (a *API) instances(w http.ResponseWriter, r *http.Request, _ Actor) {
	ins := a.cfg.History.Instances()
	out := make([]instanceJSON, len(ins))
	for i, in := range ins {
		out[i] = instanceJSON{InstanceID: in.ID, Name: in.Name, Addr: in.Addr, Version: in.Version, StartedAt: in.StartedAt,
			AliveUntil: in.Until, Sampler: in.Sampler, Self: in.Self, Warnings: append([]string{}, in.Warnings...),
			TokenKeys: append([]string{}, in.Keys...)}
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"instances": out})
}

// countHistory counts the answer on an event's route in the event's history (429s and 503s:
// line.Service.Answered, which every door calls).
func (a *API) countHistory(r *http.Request, code int) {
	if id := r.PathValue("event_id"); id != "" {
		a.cfg.Line.Answered(id, code)
	}
}
