// Package saleapi is the HTTP interface of the sale and of coupon campaigns, mounted on the
// instance's API: holds, bookings, the seat map, campaigns and their entries. Errors are RFC
// 9457 problems with stable codes (mapped from the domain's sentinel errors in one table per
// domain, problems.go); client input never causes a 5xx.
package saleapi

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/issuance"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/recorder"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/token"
)

// Request body limits (bytes).
const (
	maxHoldBody     = 4 << 10
	maxBookingBody  = 1 << 10
	maxCampaignBody = 4 << 10
	maxEntryBody    = 12 << 10
	maxID           = 64 // bytes of a booking or hold id in a path
)

// Config configures the handlers.
type Config struct {
	API     *httpapi.API      // required: the mux, admin key and admission checks
	Sales   *booking.Service  // required
	Coupons *issuance.Service // required
	// Event returns an event (the registry's Get). Required.
	Event func(ctx context.Context, id string) (event.Event, error)
	// Identity verifies identity JWTs; nil refuses entries that carry one.
	Identity *token.IdentityVerifier
	// History serves the campaigns' recent past (GET /v1/campaigns/{campaign_id}/history);
	// nil: that route is not served.
	History *recorder.Recorder
	Now     func() time.Time // defaults to time.Now
	Logger  *slog.Logger     // defaults to slog.Default()
}

type handlers struct {
	cfg     Config
	flights sync.Map // event id -> *flight (coalesced GET /seats)
}

// Mount registers the sale and campaign routes on cfg.API.
func Mount(cfg Config) error {
	if cfg.API == nil || cfg.Sales == nil || cfg.Coupons == nil || cfg.Event == nil {
		return errors.New("saleapi: Config.API, Sales, Coupons and Event are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	h := &handlers{cfg: cfg}
	a := cfg.API
	a.Handle("POST /v1/events/{event_id}/holds", http.HandlerFunc(h.hold))
	a.Handle("DELETE /v1/events/{event_id}/holds/{hold_id}", http.HandlerFunc(h.release))
	a.Handle("POST /v1/events/{event_id}/bookings", http.HandlerFunc(h.book))
	a.Handle("GET /v1/events/{event_id}/bookings/{booking_id}", http.HandlerFunc(h.getBooking))
	a.HandleAdmin("DELETE /v1/events/{event_id}/bookings/{booking_id}", admin.RoleOperator, h.cancelBooking)
	a.Handle("GET /v1/events/{event_id}/seats", http.HandlerFunc(h.seats))
	a.HandleAdmin("PUT /v1/campaigns/{campaign_id}", admin.RoleOperator, h.putCampaign)
	a.HandleAdmin("GET /v1/campaigns", admin.RoleReadOnly, h.listCampaigns)
	a.Handle("GET /v1/campaigns/{campaign_id}", http.HandlerFunc(h.getCampaign))
	if cfg.History != nil {
		a.HandleAdmin("GET /v1/campaigns/{campaign_id}/history", admin.RoleReadOnly, h.campaignHistory)
	}
	a.Handle("POST /v1/campaigns/{campaign_id}/entries", http.HandlerFunc(h.enter))
	a.Handle("GET /v1/campaigns/{campaign_id}/entries/{user_id}", http.HandlerFunc(h.getEntry))
	a.SetSaleHooks(httpapi.SaleHooks{BookingOf: cfg.Sales.BookingOf, Sold: cfg.Sales.Sold, Written: cfg.Sales.Apply})
	return nil
}

// admission checks the bearer admission token of the event (offline); it writes the problem.
func (h *handlers) admission(w http.ResponseWriter, r *http.Request, event string) (queue.TicketRef, token.AdmissionClaims, bool) {
	ref, claims, p := h.cfg.API.VerifyAdmission(r, event)
	if p != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="waitroom admission"`)
		httpjson.WriteProblem(w, p)
		return ref, claims, false
	}
	return ref, claims, true
}

// admitted is the prelude of the calls an admitted session makes (holds, bookings): the path's
// event and the request's admission token for it. On failure it has written the problem (400
// invalid_event_id, 401 invalid_token) and returns false.
func (h *handlers) admitted(w http.ResponseWriter, r *http.Request) (string, queue.TicketRef, token.AdmissionClaims, bool) {
	event, ok := httpjson.EventID(w, r)
	if !ok {
		return "", queue.TicketRef{}, token.AdmissionClaims{}, false
	}
	ref, claims, ok := h.admission(w, r, event)
	return event, ref, claims, ok
}

// bookingOf reads the booking of the path's booking_id in event: sale.ErrBookingNotFound for
// one of another event. It returns false, having written the 400, for a malformed id.
func (h *handlers) bookingOf(w http.ResponseWriter, r *http.Request, event string) (sale.BookingRecord, bool, error) {
	id, ok := httpjson.PathID(w, r, "booking_id", maxID)
	if !ok {
		return sale.BookingRecord{}, false, nil
	}
	b, err := h.cfg.Sales.Get(r.Context(), id)
	if err == nil && b.Event != event {
		err = sale.ErrBookingNotFound
	}
	return b, true, err
}

// tokenHash is the hex SHA-256 of the request's bearer token, "" without one.
func tokenHash(r *http.Request) string {
	raw, ok := httpjson.Bearer(r)
	if !ok {
		return ""
	}
	sum := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(sum[:])
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(httpjson.TimeLayout)
}
