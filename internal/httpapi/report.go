package httpapi

import (
	"bytes"
	"net/http"

	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/report"
)

// eventReport serves GET /v1/events/{event_id}/report (admin: read_only): the report after the
// sale (package report), made now from the event's history: ?format=html (the default), a page
// that stands alone; csv, the figures and the timeline; json, the figures. 400 invalid_query
// for another format.
func (a *API) eventReport(w http.ResponseWriter, r *http.Request, _ Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	q, ok := httpjson.Query(w, r, "format")
	if !ok {
		return
	}
	format := q.Get("format")
	switch format {
	case "", "html", "csv", "json":
	default:
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "format must be html, csv or json (or left out: html)"))
		return
	}
	e, ok := a.knownEvent(w, r, id)
	if !ok {
		return
	}
	lh, err := a.cfg.History.EventLifeHistory(r.Context(), e)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	rep := report.Make(report.Input{Event: e, Now: a.cfg.Now(), Points: lh.Points, Span: lh.Span, Buckets: lh.Buckets,
		Waits: lh.Life.Waits, Refusals: lh.Life.Refusals})
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	var body bytes.Buffer
	switch format {
	case "json":
		httpjson.WriteJSON(w, http.StatusOK, rep)
		return
	case "csv":
		err = report.CSV(&body, rep)
		h.Set("Content-Type", "text/csv; charset=utf-8")
		h.Set("Content-Disposition", `attachment; filename="report-`+id+`.csv"`)
	default:
		err = report.HTML(&body, rep)
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", report.ContentSecurityPolicy)
		h.Set("Referrer-Policy", "no-referrer")
	}
	if err != nil { // a template or a writer into memory: a bug
		a.cfg.Logger.Error("report", "event", id, "err", err)
		httpjson.WriteProblem(w, httpjson.NewProblem(500, "internal_error", "the report could not be made"))
		return
	}
	_, _ = w.Write(body.Bytes())
}
