package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// Request body limits (bytes).
const (
	maxEventBody = 1 << 20  // a seat list of 50,000 seats fits
	maxJoinBody  = 10 << 10 // an identity JWT may be up to 8 KiB
)

// eventBody is the JSON of PUT /v1/events/{event_id}. A PUT replaces the configuration:
// fields left out take their defaults (event.Event.WithDefaults).
type eventBody struct {
	Name        string     `json:"name"`
	MaxActive   *int64     `json:"max_active"`
	AdmitRate   float64    `json:"admit_rate"`
	SessionTTLS *int64     `json:"session_ttl_s"`
	ClaimTTLS   *int64     `json:"claim_ttl_s"`
	OpensAt     *time.Time `json:"opens_at"`
	ClosesAt    *time.Time `json:"closes_at"`
	RedirectURL string     `json:"redirect_url"`
	// The sale (see package sale): capacity, and optionally seats or a seat_map.
	Capacity      *int64         `json:"capacity"`
	Seats         []string       `json:"seats"`
	SeatMap       *event.SeatMap `json:"seat_map"`
	MaxPerBooking *int64         `json:"max_per_booking"`
	HoldTTLS      *int64         `json:"hold_ttl_s"`
	// Protection against bots (docs/api.md, "Limits").
	Limits           *limitsJSON `json:"limits"`
	IdentityRequired bool        `json:"identity_required"`
	MaxPerUser       *int64      `json:"max_per_user"`
	SessionMaxS      *int64      `json:"session_max_s"`
}

// limitsJSON is "limits": {...} of an event (fields left out take event.Limits' defaults).
type limitsJSON struct {
	JoinsPerClient *int64 `json:"joins_per_client"`
	JoinWindowS    *int64 `json:"join_window_s"`
	PushPerClient  *int64 `json:"push_per_client"`
	PollsPerTicket *int64 `json:"polls_per_ticket"`
	PollWindowS    *int64 `json:"poll_window_s"`
}

// limits reads the JSON into e.Limits; it returns a 422 detail, or "".
func (l *limitsJSON) limits(e *event.Event) string {
	if l == nil {
		return ""
	}
	for _, f := range []struct {
		v     *int64
		dst   *int64
		field string
	}{{l.JoinsPerClient, &e.Limits.JoinsPerClient, "joins_per_client"}, {l.PushPerClient, &e.Limits.PushPerClient, "push_per_client"},
		{l.PollsPerTicket, &e.Limits.PollsPerTicket, "polls_per_ticket"}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return fmt.Sprintf("limits.%s must be between 1 and %d", f.field, event.MaxLimit)
		}
		*f.dst = *f.v
	}
	for _, f := range []struct {
		v     *int64
		dst   *time.Duration
		field string
	}{{l.JoinWindowS, &e.Limits.JoinWindow, "join_window_s"}, {l.PollWindowS, &e.Limits.PollWindow, "poll_window_s"}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > 3600 {
			return "limits." + f.field + " must be between 1 and 3600"
		}
		*f.dst = time.Duration(*f.v) * time.Second
	}
	return ""
}

func limitsView(l event.Limits) *limitsJSON {
	p := func(v int64) *int64 { return &v }
	return &limitsJSON{JoinsPerClient: p(l.JoinsPerClient), JoinWindowS: p(int64(l.JoinWindow / time.Second)),
		PushPerClient: p(l.PushPerClient), PollsPerTicket: p(l.PollsPerTicket), PollWindowS: p(int64(l.PollWindow / time.Second))}
}

// ttl reads a duration field in whole seconds: left out, it takes the default (zero); given,
// it must be positive (the ranges are event.Event.Validate's).
func ttl(s *int64, field string) (time.Duration, string) {
	switch {
	case s == nil:
		return 0, ""
	case *s < 1 || *s > math.MaxInt64/int64(time.Second):
		return 0, field + " must be between 1 and 86400"
	}
	return time.Duration(*s) * time.Second, ""
}

// toEvent turns the body into the event's configuration; it returns a 422 detail, or "".
// Ranges and defaults are event.Event's; this reads only what the JSON shape adds (a required
// max_active, seats or seat_map, a capacity given with seats).
func (b eventBody) toEvent(id string) (event.Event, string) {
	if b.MaxActive == nil {
		return event.Event{}, "max_active is required"
	}
	e := event.Event{ID: id, Name: b.Name, MaxActive: *b.MaxActive, AdmitRate: b.AdmitRate, RedirectURL: b.RedirectURL,
		IdentityRequired: b.IdentityRequired}
	if detail := b.Limits.limits(&e); detail != "" {
		return e, detail
	}
	if b.MaxPerUser != nil {
		if *b.MaxPerUser < 1 {
			return e, fmt.Sprintf("max_per_user must be between 1 and %d, or left out", event.MaxMaxPerUser)
		}
		e.MaxPerUser = *b.MaxPerUser
	}
	if b.MaxPerBooking != nil {
		if *b.MaxPerBooking < 1 {
			return e, fmt.Sprintf("max_per_booking must be between 1 and %d", event.MaxPerBookingCap)
		}
		e.MaxPerBooking = *b.MaxPerBooking
	}
	var detail string
	for _, f := range []struct {
		s     *int64
		dst   *time.Duration
		field string
	}{{b.SessionTTLS, &e.SessionTTL, "session_ttl_s"}, {b.ClaimTTLS, &e.ClaimTTL, "claim_ttl_s"}, {b.HoldTTLS, &e.HoldTTL, "hold_ttl_s"},
		{b.SessionMaxS, &e.SessionMax, "session_max_s"}} {
		if *f.dst, detail = ttl(f.s, f.field); detail != "" {
			return e, detail
		}
	}
	if b.OpensAt != nil {
		e.OpensAt = b.OpensAt.UTC()
	}
	if b.ClosesAt != nil {
		e.ClosesAt = b.ClosesAt.UTC()
	}
	switch {
	case b.Seats != nil && b.SeatMap != nil:
		return e, "give seats or seat_map, not both"
	case b.Seats != nil && len(b.Seats) == 0:
		return e, "seats must list at least one seat"
	case b.SeatMap != nil:
		seats, err := b.SeatMap.Expand()
		if err != nil {
			return e, err.Error()
		}
		e.Seats, e.SeatMap = seats, b.SeatMap.JSON()
	default:
		e.Seats = b.Seats
	}
	if b.Capacity != nil {
		if *b.Capacity < 1 {
			return e, fmt.Sprintf("capacity must be between 1 and %d", event.MaxCapacity)
		}
		e.Capacity = *b.Capacity
	}
	return e, ""
}

// eventConfigJSON is an event's configuration as the API shows it (GET /v1/events lists these).
type eventConfigJSON struct {
	EventID     string     `json:"event_id"`
	Name        string     `json:"name"`
	MaxActive   int64      `json:"max_active"`
	AdmitRate   float64    `json:"admit_rate"`
	SessionTTLS int64      `json:"session_ttl_s"`
	ClaimTTLS   int64      `json:"claim_ttl_s"`
	OpensAt     *time.Time `json:"opens_at"`
	ClosesAt    *time.Time `json:"closes_at"`
	RedirectURL string     `json:"redirect_url,omitempty"`
	SessionMaxS int64      `json:"session_max_s"`
	// Protection against bots.
	Limits           *limitsJSON `json:"limits"`
	IdentityRequired bool        `json:"identity_required"`
	MaxPerUser       *int64      `json:"max_per_user"` // null: no cap
	CreatedAt        time.Time   `json:"created_at"`
	UpdatedAt        time.Time   `json:"updated_at"`
}

func eventConfigView(e event.Event) eventConfigJSON {
	return eventConfigJSON{
		EventID: e.ID, Name: e.Name, MaxActive: e.MaxActive, AdmitRate: e.AdmitRate,
		SessionTTLS: int64(e.SessionTTL / time.Second), ClaimTTLS: int64(e.ClaimTTL / time.Second),
		OpensAt: timePtr(e.OpensAt), ClosesAt: timePtr(e.ClosesAt), RedirectURL: e.RedirectURL,
		SessionMaxS: int64(e.SessionMax / time.Second), Limits: limitsView(e.Limits), IdentityRequired: e.IdentityRequired,
		MaxPerUser: maxPerUser(e.MaxPerUser), CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
	}
}

func maxPerUser(n int64) *int64 {
	if n == 0 {
		return nil
	}
	return &n
}

// eventJSON is an event as GET /v1/events/{event_id} shows it: configuration and live stats.
type eventJSON struct {
	eventConfigJSON
	State         string  `json:"state"` // pre_queue, open or closed
	Waiting       int64   `json:"waiting"`
	Active        int64   `json:"active"`
	AdmittedTotal int64   `json:"admitted_total"`
	Serving       int64   `json:"serving"`
	LastNumber    int64   `json:"last_number"`
	AdmissionRate float64 `json:"admission_rate"` // recent admissions per second
	// The sale: capacity is null when the event sells nothing; seats are listed unless a
	// seat_map gave them.
	Capacity      *int64          `json:"capacity"`
	Seats         []string        `json:"seats,omitempty"`
	SeatMap       json.RawMessage `json:"seat_map,omitempty"`
	MaxPerBooking int64           `json:"max_per_booking"`
	HoldTTLS      int64           `json:"hold_ttl_s"`
	Sold          int64           `json:"sold"`
	SoldOut       bool            `json:"sold_out"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (a *API) eventView(e event.Event, st queue.Stats) eventJSON {
	now := st.Now
	if now.IsZero() {
		now = a.cfg.Now()
	}
	return eventJSON{
		eventConfigJSON: eventConfigView(e), State: e.State(now),
		Waiting: st.Waiting, Active: st.Active, AdmittedTotal: st.AdmittedTotal, Serving: st.Serving,
		LastNumber: st.LastNumber, AdmissionRate: st.Rate,
		MaxPerBooking: e.MaxPerBooking, HoldTTLS: int64(e.HoldTTL / time.Second), SoldOut: st.SoldOut,
	}
}

// listEvents serves GET /v1/events (admin key required): {"events": [...]}, each event's
// configuration ordered by id, from the instance's registry (as of its last sync, at most a
// second old); live counters are in GET /v1/events/{event_id}.
func (a *API) listEvents(w http.ResponseWriter, r *http.Request) {
	if !a.RequireAdmin(w, r) {
		return
	}
	evs := a.cfg.Registry.List()
	slices.SortFunc(evs, func(x, y event.Event) int { return strings.Compare(x.ID, y.ID) })
	out := make([]eventConfigJSON, len(evs))
	for i, e := range evs {
		out[i] = eventConfigView(e)
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"events": out})
}

// withSale adds the sale's configuration and counters to an event view.
func (a *API) withSale(r *http.Request, v eventJSON, e event.Event) eventJSON {
	if e.Capacity == 0 {
		return v
	}
	c := e.Capacity
	v.Capacity = &c
	if e.SeatMap != "" {
		v.SeatMap = json.RawMessage(e.SeatMap)
	} else {
		v.Seats = e.Seats
	}
	if a.sale.Sold != nil {
		if sold, soldOut, ok := a.sale.Sold(r.Context(), e.ID); ok {
			v.Sold, v.SoldOut = sold, soldOut || v.SoldOut
		}
	}
	return v
}

func (a *API) putEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok || !a.RequireAdmin(w, r) {
		return
	}
	var b eventBody
	if !httpjson.ReadJSON(w, r, maxEventBody, &b, false) {
		return
	}
	e, detail := b.toEvent(id)
	if detail != "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", detail))
		return
	}
	stored, created, err := a.cfg.Registry.Put(r.Context(), e)
	if err != nil {
		var inv *registry.InvalidError
		if errors.As(err, &inv) {
			httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", inv.Error()))
			return
		}
		if errors.Is(err, sqlstore.ErrCapacityBelowSold) {
			httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "capacity below the units already sold"))
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
	httpjson.WriteJSON(w, code, a.withSale(r, a.eventView(stored, st), stored))
}

func (a *API) getEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
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
	httpjson.WriteJSON(w, 200, a.withSale(r, a.eventView(e, st), e))
}

// lineStats reads an event's counters, re-creating its line first if the store lost it.
func (a *API) lineStats(r *http.Request, e event.Event) (queue.Stats, error) {
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
	id, ok := httpjson.EventID(w, r)
	if !ok || !a.RequireAdmin(w, r) {
		return
	}
	if err := a.cfg.Registry.Delete(r.Context(), id); err != nil {
		a.StoreError(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
