package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
)

// autoJSON is an event's "auto" object: the objective and bounds of admission mode auto
// (event.Auto; docs/autoadmit.md). Absent fields take their defaults.
type autoJSON struct {
	TargetP95MS  *int64   `json:"target_p95_ms,omitempty"`
	ErrorBudget  *float64 `json:"error_budget,omitempty"`
	MinMaxActive *int64   `json:"min_max_active,omitempty"`
	MaxMaxActive *int64   `json:"max_max_active,omitempty"`
	MinAdmitRate *float64 `json:"min_admit_rate,omitempty"`
	MaxAdmitRate *float64 `json:"max_admit_rate,omitempty"`
	PinMaxActive *int64   `json:"pin_max_active,omitempty"`
	Hold         bool     `json:"hold,omitempty"`
	Origin       string   `json:"origin,omitempty"`
	HealthURL    string   `json:"health_url,omitempty"`
}

// auto sets e.Auto from mode (admission_mode) and a; it returns a 422 detail, or "".
//
// An auto object given with mode fixed is refused: it was dropped silently ("auto": null in the
// answer, out-of-range values accepted, the operator's bounds gone when auto was switched on
// later). A merge patch that switches an event to fixed without naming auto drops the stored
// one (patchEvent), as the console's "Switch to fixed limits" does.
func (a *autoJSON) auto(mode string, e *event.Event) string {
	switch mode {
	case "", event.ModeFixed:
		if a != nil {
			return `auto applies to admission_mode "auto": send it with "admission_mode": "auto", or leave it out`
		}
		return ""
	case event.ModeAuto:
	default:
		return `admission_mode must be "fixed" or "auto"`
	}
	e.Auto.Enabled = true
	if a == nil {
		return ""
	}
	if a.TargetP95MS != nil {
		if *a.TargetP95MS < 1 {
			return "auto.target_p95_ms must be between 1 and 60000"
		}
		e.Auto.TargetP95 = time.Duration(min(*a.TargetP95MS, 1<<40)) * time.Millisecond
	}
	if a.ErrorBudget != nil {
		if *a.ErrorBudget <= 0 {
			return "auto.error_budget must be above 0 and at most 1"
		}
		e.Auto.ErrorBudget = *a.ErrorBudget
	}
	for _, f := range []struct {
		v     *int64
		dst   *int64
		field string
	}{{a.MinMaxActive, &e.Auto.MinMaxActive, "min_max_active"}, {a.MaxMaxActive, &e.Auto.MaxMaxActive, "max_max_active"}} {
		if f.v != nil {
			if *f.v < 1 {
				return fmt.Sprintf("auto.%s must be between 1 and %d", f.field, event.MaxMaxActive)
			}
			*f.dst = *f.v
		}
	}
	if a.PinMaxActive != nil {
		e.Auto.PinMaxActive = *a.PinMaxActive
	}
	if a.MinAdmitRate != nil {
		e.Auto.MinAdmitRate = *a.MinAdmitRate
	}
	if a.MaxAdmitRate != nil {
		e.Auto.MaxAdmitRate = *a.MaxAdmitRate
	}
	e.Auto.Hold, e.Auto.Origin, e.Auto.HealthURL = a.Hold, a.Origin, a.HealthURL
	return ""
}

// autoView is a's JSON (nil in mode fixed).
func autoView(a event.Auto) *autoJSON {
	if !a.Enabled {
		return nil
	}
	ms := a.TargetP95.Milliseconds()
	v := &autoJSON{TargetP95MS: &ms, ErrorBudget: &a.ErrorBudget, MinMaxActive: &a.MinMaxActive, MaxMaxActive: &a.MaxMaxActive,
		MinAdmitRate: &a.MinAdmitRate, MaxAdmitRate: &a.MaxAdmitRate, Hold: a.Hold, Origin: a.Origin, HealthURL: a.HealthURL}
	if a.PinMaxActive > 0 {
		v.PinMaxActive = &a.PinMaxActive
	}
	return v
}

// reportHealth serves POST /v1/events/{event_id}/health: an origin's (or the gate
// middleware's) report of its own health since its last report, counted in this instance's
// signals (flushed to the store with the gate's measurements). 204.
func (a *API) reportHealth(w http.ResponseWriter, r *http.Request, _ Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	var f autoadmit.HealthReportFields
	if !httpjson.ReadJSON(w, r, 1<<10, &f, false) {
		return
	}
	rep, detail := f.Report()
	if detail == "" {
		detail = rep.Validate()
	}
	if detail != "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", detail))
		return
	}
	if _, ok := a.knownEvent(w, r, id); !ok {
		return
	}
	if rep.Requests > 0 {
		a.cfg.Signals.Report(id, rep.Requests, rep.Errors, rep.P95MS)
	}
	w.WriteHeader(http.StatusNoContent)
}

// autoStateJSON is GET /v1/events/{event_id}/auto.
type autoStateJSON struct {
	EventID       string           `json:"event_id"`
	AdmissionMode string           `json:"admission_mode"`
	Auto          *autoJSON        `json:"auto"`
	State         *autoadmit.State `json:"state"` // null: no controller ran yet
	Samples       []autoSampleJSON `json:"samples"`
}

type autoSampleJSON struct {
	At time.Time `json:"at"`
	autoadmit.Sample
}

// eventAuto serves GET /v1/events/{event_id}/auto: the objective, the controller's state (the
// effective limits, the last window's measurements, the last changes with their reasons) and
// its samples of the last since_s seconds (default 600, at most 3600), oldest first.
func (a *API) eventAuto(w http.ResponseWriter, r *http.Request, _ Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	e, ok := a.knownEvent(w, r, id)
	if !ok {
		return
	}
	since := int64(600)
	q, ok := httpjson.Query(w, r, "since_s")
	if !ok {
		return
	}
	if v := q.Get("since_s"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > 3600 {
			httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "since_s must be a whole number of seconds between 1 and 3600"))
			return
		}
		since = n
	}
	out := autoStateJSON{EventID: id, AdmissionMode: e.Mode(), Auto: autoView(e.Auto), Samples: []autoSampleJSON{}}
	s, seq, err := autoadmit.ReadState(r.Context(), a.cfg.AutoStore, id, e.Auto)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	if seq > 0 {
		out.State = &s
	}
	entries, err := a.cfg.AutoHistory.Range(r.Context(), autoadmit.Series(id), a.cfg.Now().Add(-time.Duration(since)*time.Second))
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	for _, en := range entries {
		var smp autoSampleJSON
		if json.Unmarshal([]byte(en.Data), &smp.Sample) == nil {
			smp.At = en.At
			out.Samples = append(out.Samples, smp)
		}
	}
	httpjson.WriteJSON(w, 200, out)
}

// healthURLAllowed is the rule of a configuration that names a new auto.health_url: one of
// the URLs the operator allows (Config.HealthURLs, serve --health-urls), since the instances
// GET it every second from their network. A URL unchanged is not checked here, so that an
// event the list no longer covers can still be paused or closed; the controller does not poll
// it. It returns a 422 detail, or "".
func (a *API) healthURLAllowed(e event.Event, before *event.Event) string {
	u := e.Auto.HealthURL
	if u == "" || (before != nil && before.Auto.HealthURL == u) || a.cfg.HealthURLs.Allows(u) {
		return ""
	}
	allowed := "none: set serve --health-urls"
	if p := a.cfg.HealthURLs.Prefixes(); len(p) > 0 {
		allowed = strings.Join(p, ", ")
	}
	return autoadmit.ErrHealthURL.Error() + " (allowed: " + allowed + ")"
}
