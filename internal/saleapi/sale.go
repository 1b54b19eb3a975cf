package saleapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/token"
)

// holdBody is a hold's request: seats, or a quantity. Both given is refused, whatever they
// hold ({"seats":["A-01"],"quantity":0}, {"quantity":1,"seats":[]} and {"quantity":1,
// "seats":null} were taken for one of them), so each member keeps whether it was given.
type holdBody struct {
	Seats    member[[]seatName] `json:"seats"`
	Quantity member[int64]      `json:"quantity"`
}

// member is a JSON object member that keeps whether it was given, null included (the decoder
// calls a value's UnmarshalJSONFrom for null too; a pointer would be left nil).
type member[T any] struct {
	given bool
	v     T
}

// UnmarshalJSONFrom implements json/v2's UnmarshalerFrom: null is given and leaves the zero
// value; anything else decodes into T, whose type a refusal names ("must be an integer").
func (m *member[T]) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	m.given = true
	if dec.PeekKind() == 'n' {
		_, err := dec.ReadToken()
		return err
	}
	return jsonv2.UnmarshalDecode(dec, &m.v)
}

// seatName is one seat of a hold's "seats": a string. null is refused as a member of the
// wrong type ("field seats.0 must be a string"): decoded as v2 decodes null into a string, it
// was "", answered as an unknown seat.
type seatName string

// UnmarshalJSONFrom implements json/v2's UnmarshalerFrom.
func (s *seatName) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() == 'n' {
		_, _ = dec.ReadToken()
		return errNullSeat
	}
	return jsonv2.UnmarshalDecode(dec, (*string)(s))
}

// errNullSeat is seatName's refusal of null; DecodeJSON names the member and its type.
var errNullSeat = errors.New("a seat is a string, not null")

// seatNames are the seats of a hold's body as strings.
func seatNames(s []seatName) []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}

type holdJSON struct {
	HoldID    string   `json:"hold_id"`
	EventID   string   `json:"event_id"`
	Seats     []string `json:"seats"`
	Quantity  int64    `json:"quantity"`
	ExpiresAt any      `json:"expires_at"`
}

func (h *handlers) hold(w http.ResponseWriter, r *http.Request) {
	event, ref, _, ok := h.admitted(w, r)
	if !ok {
		return
	}
	var b holdBody
	if !httpjson.ReadJSON(w, r, maxHoldBody, &b, false) {
		return
	}
	if len(b.Seats.v) > 100 {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_hold", "at most 100 seats"))
		return
	}
	if b.Quantity.given && b.Seats.given {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_hold", sale.SeatsOrQuantity))
		return
	}
	hd, err := h.cfg.Sales.Hold(r.Context(), booking.HoldRequest{Ticket: ref, Seats: seatNames(b.Seats.v), Quantity: b.Quantity.v})
	if err != nil {
		h.saleProblem(w, err, event)
		return
	}
	seats := hd.Seats
	if seats == nil {
		seats = []string{}
	}
	w.Header().Set("Location", "/v1/events/"+event+"/holds/"+hd.ID)
	httpjson.WriteJSON(w, http.StatusCreated, holdJSON{HoldID: hd.ID, EventID: event, Seats: seats, Quantity: hd.Quantity,
		ExpiresAt: timeOrNil(hd.ExpiresAt)})
}

func (h *handlers) release(w http.ResponseWriter, r *http.Request) {
	event, ref, _, ok := h.admitted(w, r)
	if !ok {
		return
	}
	holdID, ok := httpjson.PathID(w, r, "hold_id", maxID)
	if !ok {
		return
	}
	if err := h.cfg.Sales.Release(r.Context(), ref, holdID); err != nil {
		h.saleProblem(w, err, event)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type bookingBody struct {
	HoldID string `json:"hold_id"`
}

// bookingJSON is a booking as the API shows it.
type bookingJSON struct {
	BookingID   string   `json:"booking_id"`
	EventID     string   `json:"event_id"`
	TicketID    string   `json:"ticket_id"`
	HoldID      string   `json:"hold_id"`
	Status      string   `json:"status"`
	Quantity    int64    `json:"quantity"`
	Seats       []string `json:"seats"`
	CreatedAt   any      `json:"created_at"`
	CancelledAt any      `json:"cancelled_at"`
}

func bookingView(b sale.BookingRecord) bookingJSON {
	seats := b.Seats
	if seats == nil {
		seats = []string{}
	}
	return bookingJSON{BookingID: b.ID, EventID: b.Event, TicketID: b.TicketID, HoldID: b.HoldID, Status: b.Status,
		Quantity: b.Quantity, Seats: seats, CreatedAt: timeOrNil(b.CreatedAt), CancelledAt: timeOrNil(b.CancelledAt)}
}

func (h *handlers) book(w http.ResponseWriter, r *http.Request) {
	eventID, ref, claims, ok := h.admitted(w, r)
	if !ok {
		return
	}
	var b bookingBody
	if !httpjson.ReadJSON(w, r, maxBookingBody, &b, false) {
		return
	}
	if b.HoldID == "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "hold_id is required"))
		return
	}
	if len(b.HoldID) > 64 || !event.ValidText(b.HoldID) {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "hold_id must be at most 64 bytes of text without control characters"))
		return
	}
	// Sent, the key is one valid value, by the join's rule: an empty one (a client that failed
	// to make it) or two would book without the key the client's retry will send, which then
	// finds the booking made and answers 409 already_booked instead of it.
	key, one := httpjson.OnlyValue(r.Header, "Idempotency-Key")
	if !one {
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_idempotency_key", token.OneIdempotencyKey))
		return
	}
	if _, sent := r.Header["Idempotency-Key"]; sent && !token.ValidIdempotencyKey(key) {
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_idempotency_key", token.IdempotencyKeyRule))
		return
	}
	res, err := h.cfg.Sales.Book(r.Context(), booking.BookRequest{Ticket: ref, TicketID: claims.TicketID, HoldID: b.HoldID,
		IdempotencyKey: key, TokenHash: tokenHash(r), UserKey: claims.User})
	if err != nil {
		h.cfg.API.CountBooking(eventID, bookingOutcome(err))
		h.saleProblem(w, err, eventID)
		return
	}
	code, outcome := http.StatusCreated, "confirmed"
	if res.Replayed {
		code, outcome = http.StatusOK, "replayed"
	}
	h.cfg.API.CountBooking(eventID, outcome)
	w.Header().Set("Location", "/v1/events/"+eventID+"/bookings/"+res.Booking.ID)
	httpjson.WriteJSON(w, code, bookingView(res.Booking))
}

// holds reports whether the request's bearer is booking b's own credential: the very token the
// booking was made with (also once expired: it is compared, not verified), or a valid admission
// token of the same ticket. Such a bearer is no attempt at the admin key.
func (h *handlers) holds(r *http.Request, b sale.BookingRecord) bool {
	if th := tokenHash(r); th != "" && subtle.ConstantTimeCompare([]byte(th), []byte(b.TokenHash)) == 1 {
		return true
	}
	_, claims, p := h.cfg.API.VerifyAdmission(r, b.Event)
	return p == nil && claims.TicketID == b.TicketID
}

// getBooking serves GET /v1/events/{event_id}/bookings/{booking_id}: to the booking's holder
// (holds), else to the admin key (authenticated once, a wrong bearer counted as a failed
// admin authentication; an admission token this service signed is not one, and gets the same
// 401). Whether a booking exists is told only to the admin key.
func (h *handlers) getBooking(w http.ResponseWriter, r *http.Request) {
	event, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	if _, ok := httpjson.Bearer(r); !ok {
		httpjson.WriteProblem(w, notYourBooking())
		return
	}
	b, ok, err := h.bookingOf(w, r, event)
	if !ok {
		return
	}
	if err != nil && !errors.Is(err, sale.ErrBookingNotFound) {
		h.saleProblem(w, err, event) // the database did not answer: nobody's failure
		return
	}
	if err != nil || !h.holds(r, b) {
		if h.cfg.API.SignedAdmission(r) {
			// An admission token (of another booking, another event, or expired): the same
			// 401, but no attempt at the admin key, so a visitor behind the operator's address
			// cannot lock it out (nor is it told whether the booking exists).
			httpjson.WriteProblem(w, notYourBooking())
			return
		}
		if _, p := h.cfg.API.Authenticate(r, admin.RoleReadOnly); p != nil {
			if p.Status == http.StatusUnauthorized {
				p = notYourBooking()
			}
			httpjson.WriteProblem(w, p)
			return
		}
	}
	if err != nil {
		h.saleProblem(w, err, event)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, bookingView(b))
}

// notYourBooking is getBooking's 401 to any bearer but the booking's holder and the admin key.
func notYourBooking() *httpjson.Problem {
	return httpjson.NewProblem(401, "unauthorized", "this call needs the admin key or the booking's admission token")
}

func (h *handlers) cancelBooking(w http.ResponseWriter, r *http.Request, who httpapi.Actor) {
	event, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	b, ok, err := h.bookingOf(w, r, event)
	if !ok {
		return
	}
	changed := false
	if err == nil {
		b, changed, err = h.cfg.Sales.Cancel(r.Context(), b.ID)
	}
	if err != nil {
		h.saleProblem(w, err, event)
		return
	}
	if changed { // a repeat of a cancel changes nothing, and is no entry of the audit trail
		h.cfg.API.Audit(r, who, "booking.cancel", event, nil, bookingView(b))
	}
	httpjson.WriteJSON(w, http.StatusOK, bookingView(b))
}

// seatsJSON is GET /v1/events/{event_id}/seats.
type seatsJSON struct {
	EventID   string `json:"event_id"`
	Capacity  int64  `json:"capacity"`
	Sold      int64  `json:"sold"`
	Held      int64  `json:"held"`
	Available int64  `json:"available"`
	SoldOut   bool   `json:"sold_out"`
	// Seats maps every seat to available, held or sold (seated events only).
	Seats map[string]sale.SeatState `json:"seats,omitempty"`
}

// flight is one GET /seats read shared by the requests that arrive while it runs: any number
// of pollers cost one store call at a time per event and instance. A large seated event's
// answer is big (1,000 × 50 seats: 1 MB of JSON), so the flight also makes, once and only when
// a request accepts it, its gzip encoding (about 7 times smaller), and tags the answer with
// an ETag that a poller's If-None-Match turns into a 304.
type flight struct {
	done chan struct{}
	body []byte
	etag string // strong ETag of body, quoted; the gzip encoding's is etag with "-gz"
	err  error

	gzOnce sync.Once
	gz     []byte
}

// gzipMin is the smallest answer sent gzip-encoded to a request that accepts it (bytes):
// below it the encoding saves less than its header costs.
const gzipMin = 1024

// gzipped returns body gzip-encoded (made on the first call).
func (f *flight) gzipped() []byte {
	f.gzOnce.Do(func() {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed) // a valid level: no error
		_, _ = zw.Write(f.body)
		_ = zw.Close()
		f.gz = b.Bytes()
	})
	return f.gz
}

// acceptsGzip reports whether an Accept-Encoding header value accepts gzip (RFC 9110 12.5.3):
// "gzip" (or "x-gzip") with a weight above 0, or, when gzip is not named, "*" with one. A
// weight that is not a qvalue counts as 0: identity is always acceptable, so a doubt costs
// bytes, never an answer the client cannot read.
func acceptsGzip(header []string) bool {
	named, star := -1.0, -1.0
	for _, h := range header {
		for part := range strings.SplitSeq(h, ",") {
			name, params, _ := strings.Cut(part, ";")
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				if k, v, ok := strings.Cut(p, "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					if err != nil || f < 0 || f > 1 {
						f = 0
					}
					q = f
				}
			}
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "gzip", "x-gzip":
				named = max(named, q)
			case "*":
				star = max(star, q)
			}
		}
	}
	if named >= 0 {
		return named > 0
	}
	return star > 0
}

// noneMatch reports whether an If-None-Match header value names etag or its gzip encoding's
// (weak comparison, RFC 9110 13.1.2), or is "*".
func noneMatch(header []string, etag string) bool {
	gz := strings.TrimSuffix(etag, `"`) + `-gz"`
	for _, h := range header {
		for tag := range strings.SplitSeq(h, ",") {
			tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
			if tag == "*" || tag == etag || tag == gz {
				return true
			}
		}
	}
	return false
}

func (h *handlers) seats(w http.ResponseWriter, r *http.Request) {
	event, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	f := &flight{done: make(chan struct{})}
	if prev, loaded := h.flights.LoadOrStore(event, f); loaded {
		f = prev.(*flight)
	} else {
		go h.fly(event, f) // detached from this request: the others share it
	}
	select {
	case <-f.done:
	case <-r.Context().Done():
		if errors.Is(r.Context().Err(), context.DeadlineExceeded) { // the request's bound, not a client gone
			h.cfg.API.StoreError(w, r.Context().Err(), event)
		}
		return
	}
	if f.err != nil {
		h.saleProblem(w, f.err, event)
		return
	}
	hd := w.Header()
	// Stored by a browser only to be asked again (no-cache: each use revalidates with
	// If-None-Match); the same for every poller, whoever asks.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Vary", "Accept-Encoding")
	body, etag := f.body, f.etag
	gz := len(body) >= gzipMin && acceptsGzip(r.Header.Values("Accept-Encoding"))
	if gz {
		etag = strings.TrimSuffix(etag, `"`) + `-gz"`
	}
	hd.Set("ETag", etag)
	if noneMatch(r.Header.Values("If-None-Match"), f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if gz {
		body = f.gzipped()
		hd.Set("Content-Encoding", "gzip")
	}
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (h *handlers) fly(event string, f *flight) {
	defer func() {
		h.flights.Delete(event)
		close(f.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := h.cfg.Event(ctx, event)
	if err != nil {
		f.err = err
		return
	}
	if e.Capacity == 0 {
		f.err = sale.ErrNotForSale
		return
	}
	a, err := h.cfg.Sales.Availability(ctx, event)
	if err != nil {
		f.err = err
		return
	}
	v := seatsJSON{EventID: event, Capacity: a.Capacity, Sold: a.Sold, Held: a.Held, Available: a.Available(), SoldOut: a.SoldOut}
	if a.Seated {
		v.Seats = make(map[string]sale.SeatState, len(e.Seats))
		for _, s := range e.Seats {
			st, ok := a.Taken[s]
			if !ok {
				st = sale.SeatAvailable
			}
			v.Seats[s] = st
		}
	}
	if f.body, f.err = json.Marshal(v); f.err == nil {
		sum := sha256.Sum256(f.body)
		f.etag = `"` + hex.EncodeToString(sum[:12]) + `"`
	}
}

// bookingOutcome names a refused or failed booking for waitroom_bookings_total.
func bookingOutcome(err error) string {
	var ce *sale.ConflictError
	switch {
	case errors.As(err, &ce):
		return "conflict"
	case errors.Is(err, sale.ErrSoldOut):
		return "sold_out"
	}
	// Any other answer of the client's own making (a 4xx of the sale's table: purchase_limit,
	// an expired hold, invalid_hold, ...) is a refusal; "error" is what the service could not
	// do (the database or the store not answering), which alerts watch.
	if p, ok := saleProblems.Problem(err, ""); ok && p.Status < 500 {
		return "refused"
	}
	if errors.Is(err, event.ErrNotFound) { // deleted (or created again) while the booking was on its way: 404
		return "refused"
	}
	return "error"
}
