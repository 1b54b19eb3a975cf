package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// Request body limits (bytes).
const (
	maxEventBody = 1 << 20  // a seat list of 50,000 seats fits
	maxJoinBody  = 10 << 10 // an identity JWT may be up to 8 KiB
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
	// The sale (see package sale): capacity, and optionally seats or a seat_map.
	Capacity      *int64       `json:"capacity"`
	Seats         []string     `json:"seats"`
	SeatMap       *seatMapBody `json:"seat_map"`
	MaxPerBooking *int64       `json:"max_per_booking"`
	HoldTTLS      *int64       `json:"hold_ttl_s"`
}

// seatMapBody is "seat_map": {"rows": ["A","B"], "per_row": 20}, which expands to A-01 … B-20.
type seatMapBody struct {
	Rows   []string `json:"rows"`
	PerRow int      `json:"per_row"`
}

var rowPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,8}$`)

// expand lists the seats of the map: row "-" number, the number zero-padded to at least 2 digits.
func (m seatMapBody) expand() ([]string, error) {
	switch {
	case len(m.Rows) == 0 || len(m.Rows) > 1000:
		return nil, errors.New("seat_map.rows must list 1 to 1000 rows")
	case m.PerRow < 1 || m.PerRow > 1000:
		return nil, errors.New("seat_map.per_row must be between 1 and 1000")
	case len(m.Rows)*m.PerRow > sale.MaxSeats:
		return nil, fmt.Errorf("seat_map gives more than %d seats", sale.MaxSeats)
	}
	width := max(2, len(strconv.Itoa(m.PerRow)))
	seats := make([]string, 0, len(m.Rows)*m.PerRow)
	for _, r := range m.Rows {
		if !rowPattern.MatchString(r) {
			return nil, fmt.Errorf("seat_map row %q must match ^[A-Za-z0-9]{1,8}$", r)
		}
		for i := 1; i <= m.PerRow; i++ {
			seats = append(seats, fmt.Sprintf("%s-%0*d", r, width, i))
		}
	}
	return seats, nil
}

// saleFields validates and applies the sale fields of b to e; it returns a 422 detail, or "".
func (b eventBody) saleFields(e *sqlstore.Event) string {
	if b.Seats != nil && b.SeatMap != nil {
		return "give seats or seat_map, not both"
	}
	seats := b.Seats
	if b.SeatMap != nil {
		var err error
		if seats, err = b.SeatMap.expand(); err != nil {
			return err.Error()
		}
		raw, _ := json.Marshal(b.SeatMap)
		e.SeatMap = string(raw)
	}
	if b.Seats != nil && len(b.Seats) == 0 {
		return "seats must list at least one seat"
	}
	e.Seats = seats
	e.MaxPerBooking = sale.DefaultMaxPerBooking
	if b.MaxPerBooking != nil {
		if *b.MaxPerBooking < 1 || *b.MaxPerBooking > 100 {
			return "max_per_booking must be between 1 and 100"
		}
		e.MaxPerBooking = *b.MaxPerBooking
	}
	e.HoldTTL = sale.DefaultHoldTTL
	if b.HoldTTLS != nil {
		if *b.HoldTTLS < 1 || *b.HoldTTLS > 86400 {
			return "hold_ttl_s must be between 1 and 86400"
		}
		e.HoldTTL = time.Duration(*b.HoldTTLS) * time.Second
	}
	switch {
	case len(seats) > 0 && b.Capacity != nil && *b.Capacity != int64(len(seats)):
		return fmt.Sprintf("capacity must equal the number of seats (%d), or be left out", len(seats))
	case len(seats) > 0:
		e.Capacity = int64(len(seats))
	case b.Capacity != nil:
		e.Capacity = *b.Capacity
	}
	if b.Capacity != nil && (*b.Capacity < 1 || *b.Capacity > sale.MaxCapacity) {
		return fmt.Sprintf("capacity must be between 1 and %d", sale.MaxCapacity)
	}
	if e.Capacity == 0 {
		return ""
	}
	inv := sale.Inventory{Event: e.ID, Capacity: e.Capacity, Seats: e.Seats, MaxPerBooking: e.MaxPerBooking, HoldTTL: e.HoldTTL}
	if err := inv.Validate(); err != nil {
		return err.Error()
	}
	return ""
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
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

func eventConfigView(e sqlstore.Event) eventConfigJSON {
	cfg := event.StoreConfig(e)
	return eventConfigJSON{
		EventID: e.ID, Name: e.Name, MaxActive: e.MaxActive, AdmitRate: e.AdmitRate,
		SessionTTLS: int64(cfg.SessionTTL / time.Second), ClaimTTLS: int64(cfg.ClaimTTL / time.Second),
		OpensAt: timePtr(e.OpensAt), ClosesAt: timePtr(e.ClosesAt), RedirectURL: e.RedirectURL,
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
	}
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
		eventConfigJSON: eventConfigView(e), State: state,
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
	slices.SortFunc(evs, func(x, y sqlstore.Event) int { return strings.Compare(x.ID, y.ID) })
	out := make([]eventConfigJSON, len(evs))
	for i, e := range evs {
		out[i] = eventConfigView(e)
	}
	WriteJSON(w, http.StatusOK, map[string]any{"events": out})
}

// withSale adds the sale's configuration and counters to an event view.
func (a *API) withSale(r *http.Request, v eventJSON, e sqlstore.Event) eventJSON {
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
			WriteProblem(w, NewProblem(422, "invalid_field", "field "+ute.Field+" must be "+jsonKind(ute.Type)))
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
	if !printable(b.Name) || !printable(b.RedirectURL) {
		WriteProblem(w, NewProblem(422, "invalid_field", "name and redirect_url must be UTF-8 text without control characters"))
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
	if detail := b.saleFields(&e); detail != "" {
		WriteProblem(w, NewProblem(422, "invalid_field", detail))
		return
	}
	stored, created, err := a.cfg.Registry.Put(r.Context(), e)
	if err != nil {
		var inv *event.InvalidError
		if errors.As(err, &inv) {
			WriteProblem(w, NewProblem(422, "invalid_field", inv.Error()))
			return
		}
		if errors.Is(err, sqlstore.ErrCapacityBelowSold) {
			WriteProblem(w, NewProblem(422, "invalid_field", "capacity below the units already sold"))
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
	WriteJSON(w, code, a.withSale(r, a.eventView(stored, st), stored))
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
	WriteJSON(w, 200, a.withSale(r, a.eventView(e, st), e))
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

// printable reports whether s is valid UTF-8 without control characters (NUL included, which
// PostgreSQL text cannot hold).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct:
		if t.String() == "time.Time" {
			return "an RFC 3339 time"
		}
		return "an object"
	case reflect.Map:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
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
