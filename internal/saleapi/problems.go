package saleapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

// saleProblems maps the errors of the sale (packages sale and booking) to problems; "{id}" is
// the event. What it does not know goes to the API's table of the line's errors, or 503.
var saleProblems = httpjson.MustTable(httpjson.Table{
	{Err: sale.ErrPurchaseLimit, Status: 409, Code: "purchase_limit", With: purchaseLimit},
	{Err: sale.ErrHoldConflict, Status: 409, Code: "hold_conflict", With: holdConflict},
	{Err: sale.ErrInvalidHold, Status: 422, Code: "invalid_hold", With: invalidHold},
	{Err: booking.ErrAlreadyBooked, Status: 409, Code: "already_booked",
		Detail: "this ticket booked already (send the first booking's Idempotency-Key to get it again)", With: alreadyBooked},
	{Err: sale.ErrNotAdmitted, Status: 401, Code: "admission_not_live", Detail: "the admitted session is not live"},
	{Err: queue.ErrTicketNotFound, Status: 401, Code: "admission_not_live", Detail: "the admitted session is not live"},
	{Err: sale.ErrNoInventory, Status: 404, Code: "not_for_sale", Detail: "event {id} sells nothing (no capacity)"},
	{Err: sale.ErrNotForSale, Status: 404, Code: "not_for_sale", Detail: "event {id} sells nothing (no capacity)"},
	{Err: sale.ErrNotReady, Status: 503, Code: "sale_restoring", Detail: "the sale is being restored from the database; retry shortly"},
	{Err: sale.ErrHoldNotFound, Status: 404, Code: "hold_not_found", Detail: "no such hold (unknown, released, booked, or expired)"},
	{Err: sale.ErrHoldExpired, Status: 410, Code: "hold_expired", Detail: "the hold expired; hold again"},
	{Err: sale.ErrHoldNotYours, Status: 403, Code: "hold_not_yours", Detail: "the hold belongs to another ticket"},
	{Err: booking.ErrIdempotencyMismatch, Status: 422, Code: "idempotency_key_reused", Detail: "this Idempotency-Key was used to book another hold"},
	{Err: sale.ErrBookingNotFound, Status: 404, Code: "booking_not_found", Detail: "no such booking in event {id}"},
})

// couponProblems maps the errors of the coupon campaigns (packages coupon and issuance) to
// problems; "{id}" is the campaign.
var couponProblems = httpjson.MustTable(httpjson.Table{
	{Err: coupon.ErrNotOpen, Status: 409, Code: "campaign_not_open", With: notOpen},
	{Err: coupon.ErrCampaignNotFound, Status: 404, Code: "campaign_not_found", Detail: "no campaign {id}"},
	{Err: coupon.ErrEntryNotFound, Status: 404, Code: "entry_not_found", Detail: "this user has not entered campaign {id}"},
	{Err: coupon.ErrStockBelowIssued, Status: 422, Code: "invalid_field"},
})

// saleProblem writes the problem of an error of the sale (saleProblems).
func (h *handlers) saleProblem(w http.ResponseWriter, err error, event string) {
	h.cfg.API.WriteError(w, err, event, saleProblems)
}

// couponProblem writes the problem of an error of a campaign (couponProblems).
func (h *handlers) couponProblem(w http.ResponseWriter, err error, id string) {
	h.cfg.API.WriteError(w, err, id, couponProblems)
}

func purchaseLimit(p *httpjson.Problem, err error) {
	if pl, ok := errors.AsType[*sale.PurchaseLimitError](err); ok {
		p.Detail = "this booking would take you past the event's limit of " + strconv.FormatInt(pl.Max, 10) +
			" units per person; " + strconv.FormatInt(pl.Remaining, 10) + " remain"
		p.Extra = map[string]any{"max_per_user": pl.Max, "remaining": pl.Remaining}
	}
}

func holdConflict(p *httpjson.Problem, err error) {
	if ce, ok := errors.AsType[*sale.ConflictError](err); ok {
		seats := ce.Seats
		if seats == nil {
			seats = []string{}
		}
		p.Detail = ce.Error()
		p.Extra = map[string]any{"conflicts": seats, "available": ce.Available}
	}
}

func invalidHold(p *httpjson.Problem, err error) {
	if ie, ok := errors.AsType[*sale.InvalidError](err); ok {
		p.Detail = ie.Error()
		if len(ie.Seats) > 0 {
			p.Extra = map[string]any{"unknown_seats": ie.Seats}
		}
	}
}

func alreadyBooked(p *httpjson.Problem, err error) {
	if ab, ok := errors.AsType[*booking.AlreadyBookedError](err); ok {
		p.Extra = map[string]any{"booking_id": ab.BookingID}
	}
}

func notOpen(p *httpjson.Problem, err error) {
	if noe, ok := errors.AsType[*coupon.NotOpenError](err); ok {
		at := noe.OpensAt.UTC().Format(httpjson.TimeLayout)
		p.Detail = "entries open at " + at
		p.Extra = map[string]any{"opens_at": at}
	}
}
