package saleapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/token"
)

// errNoIdentityKey: the instance verifies no identity tokens (getEntry's bearer can then only
// be the admin key).
var errNoIdentityKey = errors.New("this instance has no identity key")

// maxStock bounds a campaign's stock.
const maxStock = 100_000_000

type campaignBody struct {
	Stock   *int64     `json:"stock"`
	OpensAt *time.Time `json:"opens_at"`
}

// campaignJSON is a campaign with its live counters.
type campaignJSON struct {
	CampaignID string `json:"campaign_id"`
	Stock      int64  `json:"stock"`
	OpensAt    any    `json:"opens_at"`
	Entries    int64  `json:"entries"`
	Issued     int64  `json:"issued"`
	Rejected   int64  `json:"rejected"`
	Pending    int64  `json:"pending"`
	CreatedAt  any    `json:"created_at"`
	UpdatedAt  any    `json:"updated_at"`
}

func campaignView(c coupon.CampaignRecord, st coupon.Stats) campaignJSON {
	return campaignJSON{CampaignID: c.ID, Stock: c.Stock, OpensAt: timeOrNil(c.OpensAt), Entries: st.Entries,
		Issued: st.Issued, Rejected: st.Rejected, Pending: st.Pending(), CreatedAt: timeOrNil(c.CreatedAt),
		UpdatedAt: timeOrNil(c.UpdatedAt)}
}

func campaignID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("campaign_id")
	if !event.ValidID(id) {
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_campaign_id", "campaign ids match ^[a-z0-9][a-z0-9_-]{0,63}$"))
		return "", false
	}
	return id, true
}

func (h *handlers) putCampaign(w http.ResponseWriter, r *http.Request, who httpapi.Actor) {
	id, ok := campaignID(w, r)
	if !ok {
		return
	}
	var b campaignBody
	if !httpjson.ReadJSON(w, r, maxCampaignBody, &b, false) {
		return
	}
	if b.Stock == nil {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "stock is required, between 0 and 100000000"))
		return
	}
	if *b.Stock < 0 || *b.Stock > maxStock {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", fmt.Sprintf("stock %d is not between 0 and 100000000", *b.Stock)))
		return
	}
	if b.OpensAt != nil && !event.ValidTime(*b.OpensAt) {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "opens_at must be between the years 1970 and 9999"))
		return
	}
	c := coupon.Campaign{ID: id, Stock: *b.Stock}
	if b.OpensAt != nil {
		c.OpensAt = b.OpensAt.UTC()
	}
	stored, created, err := h.cfg.Coupons.Put(r.Context(), c)
	if err != nil {
		h.couponProblem(w, err, id)
		return
	}
	_, st, err := h.cfg.Coupons.Get(r.Context(), id)
	if err != nil {
		h.couponProblem(w, err, id)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		w.Header().Set("Location", "/v1/campaigns/"+id)
	}
	h.cfg.API.Audit(r, who, "campaign.put", "", nil, campaignView(stored, st))
	httpjson.WriteJSON(w, code, campaignView(stored, st))
}

func (h *handlers) getCampaign(w http.ResponseWriter, r *http.Request) {
	id, ok := campaignID(w, r)
	if !ok {
		return
	}
	c, st, err := h.cfg.Coupons.Get(r.Context(), id)
	if err != nil {
		h.couponProblem(w, err, id)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, campaignView(c, st))
}

type entryBody struct {
	UserID   *string `json:"user_id"`  // nil: not given ("" is refused, as on a join)
	Identity *string `json:"identity"` // nil: not given ("" is refused, as on a join)
}

// entryJSON is an entry as its user (or the admin) sees it.
type entryJSON struct {
	CampaignID string `json:"campaign_id"`
	UserID     string `json:"user_id"`
	Status     string `json:"status"`
	// Position is the entry's place in entry order (1-based).
	Position   int64  `json:"position"`
	CouponCode string `json:"coupon_code,omitempty"`
}

func entryView(e coupon.Entry) entryJSON {
	return entryJSON{CampaignID: e.Campaign, UserID: e.UserID, Status: string(e.Status), Position: e.Number, CouponCode: e.Code}
}

func (h *handlers) enter(w http.ResponseWriter, r *http.Request) {
	id, ok := campaignID(w, r)
	if !ok {
		return
	}
	var b entryBody
	if r.ContentLength != 0 && !httpjson.ReadJSON(w, r, maxEntryBody, &b, true) {
		return
	}
	var userID string
	switch {
	case b.UserID != nil && *b.UserID == "":
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "user_id, when given, names a user: it is not empty"))
		return
	case b.Identity != nil && *b.Identity == "":
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", token.EmptyIdentity))
		return
	case b.UserID != nil && b.Identity != nil:
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "give user_id or identity, not both"))
		return
	case b.UserID != nil:
		if _, p := h.cfg.API.Authenticate(r, admin.RoleOperator); p != nil {
			if p.Status == http.StatusUnauthorized {
				p = httpjson.NewProblem(401, "admin_key_required", "user_id is honoured only with the admin key; browsers send an identity token")
			}
			httpjson.WriteProblem(w, p)
			return
		}
		if len(*b.UserID) > token.MaxUserIDLen || !event.ValidText(*b.UserID) {
			httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "user_id must be at most 128 bytes of UTF-8 text without control characters"))
			return
		}
		userID = *b.UserID
	case b.Identity != nil:
		if h.cfg.Identity == nil {
			httpjson.WriteProblem(w, httpjson.NewProblem(422, "identity_not_supported", "this instance has no identity key"))
			return
		}
		uid, err := h.cfg.Identity.Verify(*b.Identity, h.cfg.Now())
		if err != nil {
			httpjson.WriteProblem(w, invalidIdentity(err))
			return
		}
		userID = uid
	default:
		httpjson.WriteProblem(w, httpjson.NewProblem(401, "user_required", `an entry names its user: {"user_id"} with the admin key, or {"identity": <identity JWT>}`))
		return
	}
	e, created, err := h.cfg.Coupons.Enter(r.Context(), id, userID)
	if err != nil {
		h.couponProblem(w, err, id)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusAccepted
	}
	httpjson.WriteJSON(w, code, entryView(e))
}

func (h *handlers) getEntry(w http.ResponseWriter, r *http.Request) {
	id, ok := campaignID(w, r)
	if !ok {
		return
	}
	user, ok := httpjson.PathID(w, r, "user_id", token.MaxUserIDLen)
	if !ok {
		return
	}
	// The user's identity token first: a bearer that is one is no attempt at the admin key.
	raw, ok := httpjson.Bearer(r)
	if !ok {
		httpjson.WriteProblem(w, httpjson.NewProblem(401, "unauthorized", "this call needs the admin key or the user's identity token"))
		return
	}
	var idErr error = errNoIdentityKey
	if h.cfg.Identity != nil {
		var uid string
		if uid, idErr = h.cfg.Identity.Verify(raw, h.cfg.Now()); idErr == nil && uid != user {
			httpjson.WriteProblem(w, httpjson.NewProblem(403, "forbidden", "the identity token is another user's"))
			return
		}
	}
	if idErr != nil {
		if _, p := h.cfg.API.Authenticate(r, admin.RoleReadOnly); p != nil {
			if p.Status == http.StatusUnauthorized {
				p = httpjson.NewProblem(401, "unauthorized", "this call needs the admin key or the user's identity token")
				// A bearer shaped as a JWT was meant as the identity token; any other (a
				// mistyped admin key) is told what the call takes, not a token's parse error.
				if idErr != errNoIdentityKey && strings.Count(raw, ".") == 2 {
					p = invalidIdentity(idErr)
				}
			}
			httpjson.WriteProblem(w, p)
			return
		}
	}
	e, err := h.cfg.Coupons.Entry(r.Context(), id, user)
	if err != nil {
		h.couponProblem(w, err, id)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, entryView(e))
}

// listCampaigns serves GET /v1/campaigns (admin): {"campaigns": [...]}, each campaign as GET
// /v1/campaigns/{campaign_id} shows it, ordered by id, from the instance's list (as of its last
// sync, at most a second old).
func (h *handlers) listCampaigns(w http.ResponseWriter, r *http.Request, _ httpapi.Actor) {
	out := []campaignJSON{}
	for _, id := range h.cfg.Coupons.IDs() {
		c, st, err := h.cfg.Coupons.Get(r.Context(), id)
		if errors.Is(err, coupon.ErrCampaignNotFound) {
			continue // deleted since the last sync
		}
		if err != nil {
			h.couponProblem(w, err, id)
			return
		}
		out = append(out, campaignView(c, st))
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"campaigns": out})
}

// campaignSampleJSON is one sample of GET /v1/campaigns/{campaign_id}/history.
type campaignSampleJSON struct {
	At          time.Time `json:"at"`
	Stock       int64     `json:"stock"`
	Entries     int64     `json:"entries"`
	Issued      int64     `json:"issued"`
	Rejected    int64     `json:"rejected"`
	Pending     int64     `json:"pending"`
	EntriesPerS float64   `json:"entries_per_s"`
	IssuedPerS  float64   `json:"issued_per_s"`
}

// campaignForecastJSON is history.CampaignForecast.
type campaignForecastJSON struct {
	EntryRate        float64 `json:"entry_rate"`
	EntryRateWindowS float64 `json:"entry_rate_window_s"`
	IssueRate        float64 `json:"issue_rate"`
	IssueRateWindowS float64 `json:"issue_rate_window_s"`
	StockLeft        int64   `json:"stock_left"`
	StockOutS        *int64  `json:"stock_out_s"` // null: nobody enters
}

// campaignHistory serves GET /v1/campaigns/{campaign_id}/history (admin): the campaign's samples
// of the last window (after ?since=), their rates, and when entries claim the stock left.
func (h *handlers) campaignHistory(w http.ResponseWriter, r *http.Request, _ httpapi.Actor) {
	id, ok := campaignID(w, r)
	if !ok {
		return
	}
	since, ok := httpapi.SinceQuery(w, r)
	if !ok {
		return
	}
	if q, ok := httpjson.Query(w, r, "resolution_s"); !ok {
		return
	} else if _, given := q["resolution_s"]; given {
		// An event's long history has no campaign counterpart: the window's samples answered
		// as minutes would be read wrong.
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "a campaign's history has no resolution_s: it is the last window's samples, every interval_s"))
		return
	}
	if _, _, err := h.cfg.Coupons.Get(r.Context(), id); err != nil {
		h.couponProblem(w, err, id)
		return
	}
	ch, err := h.cfg.History.Campaign(r.Context(), id, since)
	if err != nil {
		h.cfg.API.StoreError(w, err, id)
		return
	}
	samples := make([]campaignSampleJSON, len(ch.Samples))
	for i, s := range ch.Samples {
		samples[i] = campaignSampleJSON{At: s.At, Stock: s.Stock, Entries: s.Entries, Issued: s.Issued, Rejected: s.Rejected,
			Pending: max(0, s.Entries-s.Issued-s.Rejected), EntriesPerS: ch.Rates[i].Entries.PerS, IssuedPerS: ch.Rates[i].Issued.PerS}
	}
	f := ch.Forecast
	stockOut := &f.StockOutS
	if f.StockOutS < 0 {
		stockOut = nil
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"campaign_id": id, "interval_s": h.cfg.History.Interval().Seconds(),
		"window_s": h.cfg.History.Window().Seconds(), "samples": samples,
		"forecast": campaignForecastJSON{EntryRate: f.Entries.PerS, EntryRateWindowS: f.Entries.Window.Seconds(),
			IssueRate: f.Issued.PerS, IssueRateWindowS: f.Issued.Window.Seconds(), StockLeft: f.StockLeft, StockOutS: stockOut}})
}

// invalidIdentity is the 401 of an identity token that did not verify, worded as a join's
// (line.TokenReason: the reason, without the JWT library's inner errors).
func invalidIdentity(err error) *httpjson.Problem {
	return httpjson.NewProblem(401, "invalid_identity", "the identity token is invalid: "+line.TokenReason(err))
}
