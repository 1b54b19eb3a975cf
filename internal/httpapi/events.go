package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// Request body limits (bytes).
const (
	maxEventBody = 64 << 10
	maxJoinBody  = 4 << 10
)

// eventBody is the JSON of PUT /v1/events/{event_id}. A PUT replaces the configuration:
// fields left out take their defaults.
type eventBody struct {
	Name        string     `json:"name"`
	MaxActive   *int64     `json:"max_active"`
	AdmitRate   float64    `json:"admit_rate"`
	SessionTTLS *int64     `json:"session_ttl_s"`
	ClaimTTLS   *int64     `json:"claim_ttl_s"`
	OpensAt     *time.Time `json:"opens_at"`
	ClosesAt    *time.Time `json:"closes_at"`
	RedirectURL string     `json:"redirect_url"`
}

// eventJSON is an event as GET /v1/events/{event_id} shows it: configuration and live stats.
type eventJSON struct {
	EventID       string     `json:"event_id"`
	Name          string     `json:"name"`
	MaxActive     int64      `json:"max_active"`
	AdmitRate     float64    `json:"admit_rate"`
	SessionTTLS   int64      `json:"session_ttl_s"`
	ClaimTTLS     int64      `json:"claim_ttl_s"`
	OpensAt       *time.Time `json:"opens_at"`
	ClosesAt      *time.Time `json:"closes_at"`
	RedirectURL   string     `json:"redirect_url,omitempty"`
	State         string     `json:"state"` // pre_queue, open or closed
	Waiting       int64      `json:"waiting"`
	Active        int64      `json:"active"`
	AdmittedTotal int64      `json:"admitted_total"`
	Serving       int64      `json:"serving"`
	LastNumber    int64      `json:"last_number"`
	AdmissionRate float64    `json:"admission_rate"` // recent admissions per second
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (a *API) eventView(e sqlstore.Event, st queue.Stats) eventJSON {
	cfg := event.StoreConfig(e)
	state := "open"
	now := st.Now
	if now.IsZero() {
		now = a.cfg.Now()
	}
	switch {
	case !cfg.ClosesAt.IsZero() && !now.Before(cfg.ClosesAt):
		state = "closed"
	case !cfg.OpensAt.IsZero() && now.Before(cfg.OpensAt):
		state = "pre_queue"
	}
	return eventJSON{
		EventID: e.ID, Name: e.Name, MaxActive: e.MaxActive, AdmitRate: e.AdmitRate,
		SessionTTLS: int64(cfg.SessionTTL / time.Second), ClaimTTLS: int64(cfg.ClaimTTL / time.Second),
		OpensAt: timePtr(e.OpensAt), ClosesAt: timePtr(e.ClosesAt), RedirectURL: e.RedirectURL, State: state,
		Waiting: st.Waiting, Active: st.Active, AdmittedTotal: st.AdmittedTotal, Serving: st.Serving,
		LastNumber: st.LastNumber, AdmissionRate: st.Rate, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
	}
}

func eventID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("event_id")
	if !queue.ValidEventID(id) {
		WriteProblem(w, NewProblem(400, "invalid_event_id", "event ids match ^[a-z0-9][a-z0-9_-]{0,63}$"))
		return "", false
	}
	return id, true
}

// ReadJSON decodes a size-limited JSON body into v, refusing unknown fields. An empty body
// leaves v as it is when allowEmpty. It writes the problem and returns false on failure.
func ReadJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, allowEmpty bool) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteProblem(w, NewProblem(413, "body_too_large", "the body must be at most "+strconv.FormatInt(limit, 10)+" bytes"))
		} else {
			WriteProblem(w, NewProblem(400, "malformed_json", "could not read the body: "+err.Error()))
		}
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return true
		}
		WriteProblem(w, NewProblem(400, "malformed_json", "a JSON body is required"))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &ute):
			WriteProblem(w, NewProblem(422, "invalid_field", "field "+ute.Field+" must be "+ute.Type.String()))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			WriteProblem(w, NewProblem(422, "invalid_field", strings.TrimPrefix(err.Error(), "json: ")))
		default:
			WriteProblem(w, NewProblem(400, "malformed_json", err.Error()))
		}
		return false
	}
	if dec.More() {
		WriteProblem(w, NewProblem(400, "malformed_json", "the body must hold one JSON value"))
		return false
	}
	return true
}

func (a *API) putEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := eventID(w, r)
	if !ok || !a.RequireAdmin(w, r) {
		return
	}
	var b eventBody
	if !ReadJSON(w, r, maxEventBody, &b, false) {
		return
	}
	if b.MaxActive == nil {
		WriteProblem(w, NewProblem(422, "invalid_field", "max_active is required"))
		return
	}
	e := sqlstore.Event{ID: id, Name: b.Name, MaxActive: *b.MaxActive, AdmitRate: b.AdmitRate, RedirectURL: b.RedirectURL}
	if len(b.Name) > 200 {
		WriteProblem(w, NewProblem(422, "invalid_field", "name must be at most 200 bytes"))
		return
	}
	if len(b.RedirectURL) > 2000 {
		WriteProblem(w, NewProblem(422, "invalid_field", "redirect_url must be at most 2000 bytes"))
		return
	}
	for _, f := range []struct {
		v   *int64
		dst *time.Duration
		def time.Duration
		n   string
	}{{b.SessionTTLS, &e.SessionTTL, queue.DefaultSessionTTL, "session_ttl_s"}, {b.ClaimTTLS, &e.ClaimTTL, queue.DefaultClaimTTL, "claim_ttl_s"}} {
		*f.dst = f.def
		if f.v != nil {
			if *f.v < 1 || *f.v > 86400 {
				WriteProblem(w, NewProblem(422, "invalid_field", f.n+" must be between 1 and 86400"))
				return
			}
			*f.dst = time.Duration(*f.v) * time.Second
		}
	}
	if b.OpensAt != nil {
		e.OpensAt = b.OpensAt.UTC()
	}
	if b.ClosesAt != nil {
		e.ClosesAt = b.ClosesAt.UTC()
	}
	stored, created, err := a.cfg.Registry.Put(r.Context(), e)
	if err != nil {
		var inv *event.InvalidError
		if errors.As(err, &inv) {
			WriteProblem(w, NewProblem(422, "invalid_field", inv.Error()))
			return
		}
		a.StoreError(w, err, id)
		return
	}
	st, err := a.cfg.Store.Stats(r.Context(), id)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		w.Header().Set("Location", "/v1/events/"+id)
	}
	WriteJSON(w, code, a.eventView(stored, st))
}

func (a *API) getEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := eventID(w, r)
	if !ok {
		return
	}
	e, err := a.cfg.Registry.Get(r.Context(), id)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	st, err := a.lineStats(r, e)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	WriteJSON(w, 200, a.eventView(e, st))
}

// lineStats reads an event's counters, re-creating its line first if the store lost it.
func (a *API) lineStats(r *http.Request, e sqlstore.Event) (queue.Stats, error) {
	st, err := a.cfg.Store.Stats(r.Context(), e.ID)
	if errors.Is(err, queue.ErrEventNotFound) {
		if err = a.restoreLine(r, e.ID); err == nil {
			st, err = a.cfg.Store.Stats(r.Context(), e.ID)
		}
	}
	return st, err
}

// restoreLine writes a known event's configuration back to a store that lost its line (the
// registry's sync would do it within a second; this spares the person in front of us the wait).
// It returns the store's not-found error when the event is unknown.
func (a *API) restoreLine(r *http.Request, id string) error {
	return a.cfg.Registry.Restore(r.Context(), id)
}

func (a *API) deleteEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := eventID(w, r)
	if !ok || !a.RequireAdmin(w, r) {
		return
	}
	if err := a.cfg.Registry.Delete(r.Context(), id); err != nil {
		a.StoreError(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteProblem(w, NewProblem(500, "internal_error", "could not encode the response"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
