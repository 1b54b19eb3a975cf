package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/sale"
)

// Request body limits (bytes).
const (
	maxEventBody = 1 << 20  // a seat list of 50,000 seats fits
	maxJoinBody  = 20 << 10 // an identity JWT may be up to 8 KiB, a captcha token as much
)

// eventBody is the JSON of PUT /v1/events/{event_id}. A PUT replaces the configuration:
// fields left out take their defaults (event.Event.WithDefaults).
type eventBody struct {
	Name        string     `json:"name"`
	MaxActive   *int64     `json:"max_active"`
	AdmitRate   float64    `json:"admit_rate"`
	SessionTTLS *int64     `json:"session_ttl_s"`
	ClaimTTLS   *int64     `json:"claim_ttl_s"`
	OpensAt     *time.Time `json:"opens_at,omitempty"`
	ClosesAt    *time.Time `json:"closes_at,omitempty"`
	RedirectURL string     `json:"redirect_url"`
	// Paused stops admissions (joins still queue); the page shows PauseMessage meanwhile.
	Paused       bool   `json:"paused"`
	PauseMessage string `json:"pause_message"`
	// The sale (see package sale): capacity, and optionally seats or a seat_map.
	Capacity      *int64         `json:"capacity,omitempty"`
	Seats         []string       `json:"seats,omitempty"`
	SeatMap       *event.SeatMap `json:"seat_map,omitempty"`
	MaxPerBooking *int64         `json:"max_per_booking"`
	HoldTTLS      *int64         `json:"hold_ttl_s"`
	// Protection against bots (docs/api.md, "Limits").
	Limits           *limitsJSON `json:"limits"`
	IdentityRequired bool        `json:"identity_required"`
	MaxPerUser       *int64      `json:"max_per_user"`
	SessionMaxS      *int64      `json:"session_max_s"`
	// The waiting page (docs/api.md, "The waiting page").
	Page *pageJSON `json:"page,omitempty"`
	// Challenge asks joins for a proof of work or a captcha token (docs/challenge.md).
	Challenge *challengeConfigJSON `json:"challenge,omitempty"`
	// PrequeueOrder orders the pre-queue at the opening: "random" (drawn, the default) or
	// "arrival" (docs/draw.md).
	PrequeueOrder string `json:"prequeue_order"`
	// AdmissionMode is "fixed" (max_active and admit_rate as given, the default) or "auto"
	// (the limits follow the origin's health within Auto's bounds; docs/autoadmit.md).
	AdmissionMode string    `json:"admission_mode,omitempty"`
	Auto          *autoJSON `json:"auto,omitempty"`
	readOnly
}

// readOnly are the members of GET /v1/events/{event_id} that describe the event rather than
// configure it. A PUT or PATCH may carry them, so that what GET answered can be written back
// as it is, and they change nothing; event_id, when given, must be the path's.
type readOnly struct {
	EventID       *string         `json:"event_id,omitempty"`
	Version       json.RawMessage `json:"version,omitempty"`
	CreatedAt     json.RawMessage `json:"created_at,omitempty"`
	UpdatedAt     json.RawMessage `json:"updated_at,omitempty"`
	State         json.RawMessage `json:"state,omitempty"`
	Waiting       json.RawMessage `json:"waiting,omitempty"`
	Active        json.RawMessage `json:"active,omitempty"`
	AdmittedTotal json.RawMessage `json:"admitted_total,omitempty"`
	Serving       json.RawMessage `json:"serving,omitempty"`
	LastNumber    json.RawMessage `json:"last_number,omitempty"`
	AdmissionRate json.RawMessage `json:"admission_rate,omitempty"`
	Sold          json.RawMessage `json:"sold,omitempty"`
	SoldOut       json.RawMessage `json:"sold_out,omitempty"`
}

// pageJSON is "page": {...} of an event: every field optional ("" or left out: the page's
// own). Ranges are event.Page.Validate's.
type pageJSON struct {
	Title    string      `json:"title,omitempty"`
	Message  string      `json:"message,omitempty"`
	LogoURL  string      `json:"logo_url,omitempty"`
	Colors   *colorsJSON `json:"colors,omitempty"`
	Language string      `json:"language,omitempty"`
	Unit     string      `json:"unit,omitempty"`
	Template string      `json:"template,omitempty"`
	CSS      string      `json:"css,omitempty"`
}

// colorsJSON is "page": {"colors": {...}}: CSS hex colours.
type colorsJSON struct {
	Background string `json:"background,omitempty"`
	Text       string `json:"text,omitempty"`
	Accent     string `json:"accent,omitempty"`
}

func (p *pageJSON) page() event.Page {
	if p == nil {
		return event.Page{}
	}
	pg := event.Page{Title: p.Title, Message: p.Message, LogoURL: p.LogoURL, Language: p.Language, Unit: p.Unit,
		Template: p.Template, CSS: p.CSS}
	if p.Colors != nil {
		pg.Colors = event.PageColors{Background: p.Colors.Background, Text: p.Colors.Text, Accent: p.Colors.Accent}
	}
	return pg
}

// pageView is the page as the API shows it: nil for the plain page.
func pageView(p event.Page) *pageJSON {
	if p.IsZero() {
		return nil
	}
	v := &pageJSON{Title: p.Title, Message: p.Message, LogoURL: p.LogoURL, Language: p.Language, Unit: p.Unit,
		Template: p.Template, CSS: p.CSS}
	if !p.Colors.IsZero() {
		v.Colors = &colorsJSON{Background: p.Colors.Background, Text: p.Colors.Text, Accent: p.Colors.Accent}
	}
	return v
}

// limitsJSON is "limits": {...} of an event (fields left out take event.Limits' defaults).
type limitsJSON struct {
	JoinsPerClient *int64 `json:"joins_per_client"`
	JoinWindowS    *int64 `json:"join_window_s"`
	// TicketsPerClient caps one client's tickets of the pre-queue (event.Limits).
	TicketsPerClient *int64 `json:"tickets_per_client"`
	PushPerClient    *int64 `json:"push_per_client"`
	PollsPerTicket   *int64 `json:"polls_per_ticket"`
	PollWindowS      *int64 `json:"poll_window_s"`
	// AddressesPerAdmission: client addresses that may use one admission at once.
	AddressesPerAdmission *int64 `json:"addresses_per_admission"`
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
	}{{l.JoinsPerClient, &e.Limits.JoinsPerClient, "joins_per_client"}, {l.TicketsPerClient, &e.Limits.TicketsPerClient, "tickets_per_client"},
		{l.PushPerClient, &e.Limits.PushPerClient, "push_per_client"},
		{l.PollsPerTicket, &e.Limits.PollsPerTicket, "polls_per_ticket"},
		{l.AddressesPerAdmission, &e.Limits.AddressesPerAdmission, "addresses_per_admission"}} {
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
		TicketsPerClient: p(l.TicketsPerClient), PushPerClient: p(l.PushPerClient), PollsPerTicket: p(l.PollsPerTicket), PollWindowS: p(int64(l.PollWindow / time.Second)),
		AddressesPerAdmission: p(l.AddressesPerAdmission)}
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
		Paused: b.Paused, PauseMessage: b.PauseMessage, IdentityRequired: b.IdentityRequired, Page: b.Page.page(),
		PrequeueOrder: b.PrequeueOrder}
	if detail := b.Limits.limits(&e); detail != "" {
		return e, detail
	}
	if detail := b.Challenge.challenge(&e); detail != "" {
		return e, detail
	}
	if detail := b.Auto.auto(b.AdmissionMode, &e); detail != "" {
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
		if !event.ValidTime(*b.OpensAt) {
			return e, "opens_at must be between the years 1970 and 9999"
		}
		e.OpensAt = b.OpensAt.UTC()
	}
	if b.ClosesAt != nil {
		if !event.ValidTime(*b.ClosesAt) {
			return e, "closes_at must be between the years 1970 and 9999"
		}
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
	EventID      string     `json:"event_id"`
	Name         string     `json:"name"`
	MaxActive    int64      `json:"max_active"`
	AdmitRate    float64    `json:"admit_rate"`
	SessionTTLS  int64      `json:"session_ttl_s"`
	ClaimTTLS    int64      `json:"claim_ttl_s"`
	OpensAt      *time.Time `json:"opens_at"`
	ClosesAt     *time.Time `json:"closes_at"`
	RedirectURL  string     `json:"redirect_url,omitempty"`
	Paused       bool       `json:"paused"`
	PauseMessage string     `json:"pause_message,omitempty"`
	SessionMaxS  int64      `json:"session_max_s"`
	// Protection against bots.
	Limits           *limitsJSON `json:"limits"`
	IdentityRequired bool        `json:"identity_required"`
	MaxPerUser       *int64      `json:"max_per_user"` // null: no cap
	// The waiting page; left out for the plain page.
	Page *pageJSON `json:"page,omitempty"`
	// Challenge is null when joins need none; its secret is never shown.
	Challenge     *challengeConfigJSON `json:"challenge"`
	PrequeueOrder string               `json:"prequeue_order"`
	// AdmissionMode is "fixed" or "auto"; in mode auto, max_active and admit_rate above are
	// the effective limits the controller chose, and Auto its objective and bounds.
	AdmissionMode string    `json:"admission_mode"`
	Auto          *autoJSON `json:"auto,omitempty"`
	Version       int64     `json:"version"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

func eventConfigView(e event.Event) eventConfigJSON {
	return eventConfigJSON{
		EventID: e.ID, Name: e.Name, MaxActive: e.MaxActive, AdmitRate: e.AdmitRate,
		SessionTTLS: int64(e.SessionTTL / time.Second), ClaimTTLS: int64(e.ClaimTTL / time.Second),
		OpensAt: timePtr(e.OpensAt), ClosesAt: timePtr(e.ClosesAt), RedirectURL: e.RedirectURL,
		Paused: e.Paused, PauseMessage: e.PauseMessage, Version: e.Version,
		SessionMaxS: int64(e.SessionMax / time.Second), Limits: limitsView(e.Limits), IdentityRequired: e.IdentityRequired,
		MaxPerUser: maxPerUser(e.MaxPerUser), Page: pageView(e.Page), Challenge: publicChallengeView(e.Challenge),
		PrequeueOrder: e.PrequeueOrder, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		AdmissionMode: e.Mode(), Auto: autoView(e.Auto),
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
func (a *API) listEvents(w http.ResponseWriter, r *http.Request, _ Actor) {
	evs := a.cfg.Registry.List()
	slices.SortFunc(evs, func(x, y event.Event) int { return strings.Compare(x.ID, y.ID) })
	out := make([]eventConfigJSON, len(evs))
	for i, e := range evs {
		out[i] = eventConfigView(e)
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"events": out})
}

// withSale adds the sale's configuration and counters to an event view. Errors: the
// database's, when it did not answer for the counters.
func (a *API) withSale(r *http.Request, v eventJSON, e event.Event) (eventJSON, error) {
	if e.Capacity == 0 {
		return v, nil
	}
	c := e.Capacity
	v.Capacity = &c
	if e.SeatMap != "" {
		v.SeatMap = json.RawMessage(e.SeatMap)
	} else {
		v.Seats = e.Seats
	}
	if a.sale.Sold != nil {
		sold, soldOut, err := a.sale.Sold(r.Context(), e.ID)
		switch {
		case err == nil:
			v.Sold, v.SoldOut = sold, soldOut || v.SoldOut
		case !errors.Is(err, sale.ErrNotForSale):
			return v, err
		}
	}
	return v, nil
}

// putEvent serves PUT /v1/events/{event_id}: the whole configuration (fields left out take
// their defaults). With If-Match, only over that version (412 otherwise); with If-None-Match: *,
// only when no such event exists (412 otherwise: the console's "create" never replaces one).
func (a *API) putEvent(w http.ResponseWriter, r *http.Request, who Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	ifVersion, ok := a.ifMatch(w, r, id)
	if !ok {
		return
	}
	if inm := strings.TrimSpace(r.Header.Get("If-None-Match")); inm != "" {
		if inm != "*" || ifVersion != 0 || r.Header.Get("If-Match") != "" {
			httpjson.WriteProblem(w, httpjson.NewProblem(412, "precondition_failed",
				"If-None-Match on PUT /v1/events/{event_id} is * (create only), without If-Match"))
			return
		}
		ifVersion = event.CreateOnly
	}
	var b eventBody
	if !httpjson.ReadJSON(w, r, maxEventBody, &b, false) {
		return
	}
	var before *event.Event // for the audit trail
	if cur, err := a.cfg.Registry.Fresh(r.Context(), id); err == nil {
		before = &cur
	} else if !errors.Is(err, registry.ErrNotFound) {
		a.StoreError(w, err, id)
		return
	}
	a.writeEvent(w, r, who, id, b, ifVersion, "event.put", before, false)
}

// patchEvent serves PATCH /v1/events/{event_id}: a JSON Merge Patch (RFC 7396) of the
// configuration as PUT takes it, so only the fields named change (null removes an optional
// one). The patch applies to the version read, and is written only over it: a concurrent
// change answers 412, so no change is lost. With If-Match, the version read must be that one.
func (a *API) patchEvent(w http.ResponseWriter, r *http.Request, who Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	ifVersion, ok := a.ifMatch(w, r, id)
	if !ok {
		return
	}
	var patch map[string]json.RawMessage // a merge patch of a configuration is an object
	if !httpjson.ReadJSON(w, r, maxEventBody, &patch, false) {
		return
	}
	// Without a version to hold to (no If-Match, or "*"), a patch that lost the race to another
	// write is applied again to the version that won: the client asked for its fields, not
	// for a version, and a 412 it did not ask for would be its to retry (RFC 9110 13.1: 412
	// answers a precondition the request made). A patch with If-Match of a version is
	// written over that version only, or refused.
	for attempt := 1; ; attempt++ {
		if !a.patchOnce(w, r, who, id, ifVersion, patch, ifVersion <= 0 && attempt < patchAttempts) {
			return
		}
	}
}

// patchAttempts bounds the writes of one PATCH without a version condition that other writes
// overtake (each re-reads the event and merges the patch again).
const patchAttempts = 8

// patchOnce merges patch into the event as stored and writes it over that version. With
// mayRetry, a write another one overtook answers nothing and returns true (apply it again);
// otherwise the answer is written and it returns false.
func (a *API) patchOnce(w http.ResponseWriter, r *http.Request, who Actor, id string, ifVersion int64,
	patch map[string]json.RawMessage, mayRetry bool) (retry bool) {
	cur, ok := a.current(w, r, id, ifVersion)
	if !ok {
		return false
	}
	if inm, sent := r.Header["If-None-Match"]; sent && noneMatchFails(strings.Join(inm, ","), cur.Version) {
		// RFC 9110 13.1.2: "*" fails for any event that exists, a tag for the version it names.
		p := httpjson.NewProblem(412, "precondition_failed", "If-None-Match names the event as it is (version "+
			strconv.FormatInt(cur.Version, 10)+"): a PATCH changes an existing event; make it conditional with If-Match")
		p.Extra = map[string]any{"current_version": cur.Version}
		w.Header().Set("ETag", etag(cur.Version))
		httpjson.WriteProblem(w, p)
		return false
	}
	base, _ := json.Marshal(bodyOf(cur)) // plain fields: cannot fail
	raw, _ := json.Marshal(patch)
	merged, err := jsonpatch.MergePatch(base, raw)
	if err != nil {
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "malformed_json", "the body is not a JSON Merge Patch: "+err.Error()))
		return false
	}
	var b eventBody
	if !httpjson.DecodeJSON(w, merged, &b) {
		return false
	}
	if _, named := patch["auto"]; !named && (b.AdmissionMode == "" || b.AdmissionMode == event.ModeFixed) {
		// A switch to fixed (or a patch of a fixed event) that does not name auto: the stored
		// bounds of mode auto go with the mode.
		b.Auto = nil
	}
	if detail := secretForNewURL(patch, b, cur); detail != "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", detail))
		return false
	}
	return a.writeEvent(w, r, who, id, b, cur.Version, "event.patch", &cur, mayRetry)
}

// writeEvent stores the configuration b (over ifVersion when > 0), records who's action in
// the audit trail (before: the configuration it replaced, nil when none) and answers with the
// event. With mayRetry, a write that finds another version stored (an *event.VersionError)
// answers nothing and returns true.
func (a *API) writeEvent(w http.ResponseWriter, r *http.Request, who Actor, id string, b eventBody, ifVersion int64, action string,
	before *event.Event, mayRetry bool) (retry bool) {
	if b.EventID != nil && *b.EventID != id {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "event_id is the path's ("+id+"); an event cannot be renamed"))
		return false
	}
	if c := b.Challenge; before != nil && c != nil && c.Secret == nil && c.Type == before.Challenge.Type &&
		before.Challenge.Secret != "" && (c.SiteverifyURL == nil || *c.SiteverifyURL == before.Challenge.SiteverifyURL) {
		// GET never shows the secret: a body read there and written back keeps the stored one.
		// A new siteverify_url needs the secret again.
		secret := before.Challenge.Secret
		c.Secret = &secret
	}
	if action == "event.put" && before != nil && before.Auto.Enabled && b.AdmissionMode == "auto" {
		// In mode auto a read shows the controller's effective limits as max_active and
		// admit_rate, which move with every decision: a PUT that stays in mode auto keeps the
		// ones stored (the default of auto.max_max_active, and the limits a switch back to
		// fixed returns to) whatever it says, so that a body read there and written back, a
		// decision later, does not make the limits of that moment the configuration. Set the
		// bounds in auto, or the limits with the switch to fixed.
		stored := before.MaxActive
		b.MaxActive, b.AdmitRate = &stored, before.AdmitRate
	}
	e, detail := b.toEvent(id)
	if detail == "" {
		detail = a.siteverifyAllowed(e, before)
	}
	if detail == "" {
		detail = a.healthURLAllowed(e, before)
	}
	if detail != "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", detail))
		return false
	}
	if action == "event.patch" && before != nil && sameConfig(e, *before) {
		// A patch that changes nothing (the values the event has, or only members PUT
		// ignores) writes nothing: no new version (a client's next If-Match still holds), no
		// audit entry.
		a.answerEvent(w, r, id, *before, http.StatusOK)
		return false
	}
	stored, created, err := a.cfg.Registry.Put(r.Context(), e, ifVersion)
	if _, lost := errors.AsType[*event.VersionError](err); lost && mayRetry {
		return true
	}
	if errors.Is(err, event.ErrNotFound) && ifVersion == event.UpdateOnly {
		writeNoSuchForIfMatch(w, id)
		return false
	}
	if ve, exists := errors.AsType[*event.VersionError](err); exists && ifVersion == event.CreateOnly {
		p := httpjson.NewProblem(412, "precondition_failed", "event "+id+" exists already (at "+etag(ve.Current)+
			"): If-None-Match: * only creates; change it with PATCH and If-Match")
		p.Header = http.Header{}
		p.Header.Set("ETag", etag(ve.Current))
		p.Extra = map[string]any{"current_version": ve.Current}
		httpjson.WriteProblem(w, p)
		return false
	}
	if err != nil {
		a.StoreError(w, err, id)
		return false
	}
	var was any
	if before != nil {
		was = auditView(*before)
	}
	a.Audit(r, who, action, id, was, auditView(stored))
	if a.sale.Written != nil {
		if err := a.sale.Written(r.Context(), stored); err != nil {
			a.cfg.Logger.Warn("the sale's store did not take the new configuration yet; its sync will", "event", id, "err", err)
		}
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		w.Header().Set("Location", "/v1/events/"+id)
	}
	a.answerEvent(w, r, id, stored, code)
	return false
}

// sameConfig reports whether e, a configuration about to be written, is cur's as stored:
// every field but those the database keeps (the version, the timestamps, the draw's seed: one
// stored is never replaced), with e's defaults, and instants compared as instants.
func sameConfig(e, cur event.Event) bool {
	norm := func(x event.Event) []byte {
		x = x.WithDefaults()
		x.Version, x.CreatedAt, x.UpdatedAt, x.DrawSeed = 0, time.Time{}, time.Time{}, nil
		x.OpensAt, x.ClosesAt = x.OpensAt.UTC(), x.ClosesAt.UTC()
		b, err := json.Marshal(x)
		if err != nil {
			return nil
		}
		return b
	}
	a, b := norm(e), norm(cur)
	return a != nil && bytes.Equal(a, b)
}

// answerEvent answers a write of the event stored with code: the event as GET shows it (in
// admission mode auto with the effective limits, not those written), and its ETag.
func (a *API) answerEvent(w http.ResponseWriter, r *http.Request, id string, stored event.Event, code int) {
	st, err := a.cfg.Line.Stats(r.Context(), id)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	stored = a.cfg.Registry.Effective(stored)
	v, err := a.withSale(r, a.eventView(stored, st), stored)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	w.Header().Set("ETag", etag(stored.Version))
	httpjson.WriteJSON(w, code, v)
}

// etag is the entity tag of an event's configuration version.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch reads If-Match (RFC 9110 13.1.1) of a write of event id: 0 when absent,
// event.UpdateOnly for "*" (any existing version: no event, no write), else the version its
// strong tag names. Of a list of strong tags it is the one that names the event's current
// version (the write then checks it again, atomically), and with none naming it the write is
// refused as for a stale tag (412 with the current ETag). An empty value, a weak tag (which
// never matches a write: strong comparison) or a malformed one answers 412 saying what the
// header must be, with the current ETag and version when the event exists. ok false: answered.
func (a *API) ifMatch(w http.ResponseWriter, r *http.Request, id string) (v int64, ok bool) {
	vs, sent := r.Header["If-Match"]
	if !sent {
		return 0, true
	}
	h := strings.TrimSpace(strings.Join(vs, ","))
	if h == "*" {
		return event.UpdateOnly, true
	}
	var tags []int64
	for _, t := range strings.Split(h, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue // an empty element of a list is none (RFC 9110 5.6.1.2)
		}
		v, good := strongVersionTag(t)
		if !good {
			a.badIfMatch(w, r, id)
			return 0, false
		}
		tags = append(tags, v)
	}
	switch len(tags) {
	case 0:
		a.badIfMatch(w, r, id)
		return 0, false
	case 1:
		return tags[0], true
	}
	cur, err := a.cfg.Registry.Fresh(r.Context(), id)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		a.StoreError(w, &event.VersionError{}, id)
		return 0, false
	case err != nil:
		a.StoreError(w, err, id)
		return 0, false
	case !slices.Contains(tags, cur.Version):
		a.StoreError(w, &event.VersionError{Current: cur.Version}, id)
		return 0, false
	}
	return cur.Version, true
}

// badIfMatch answers an If-Match that is not "*" nor strong entity tags: 412 saying what it
// must be, with the event's current ETag and version when it exists.
func (a *API) badIfMatch(w http.ResponseWriter, r *http.Request, id string) {
	p := httpjson.NewProblem(412, "precondition_failed",
		"If-Match must be strong entity tags of GET /v1/events/{event_id}, such as \"3\" (a weak tag W/\"3\" never matches a write)")
	p.Extra = map[string]any{"current_version": 0}
	if cur, err := a.cfg.Registry.Fresh(r.Context(), id); err == nil {
		p.Extra["current_version"] = cur.Version
		w.Header().Set("ETag", etag(cur.Version))
	}
	httpjson.WriteProblem(w, p)
}

// noneMatchFails reports whether If-None-Match h fails for an event at version v: "*", or a list
// holding v's tag (weak comparison: W/"3" is "3").
func noneMatchFails(h string, v int64) bool {
	for _, t := range strings.Split(h, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag(v) {
			return true
		}
	}
	return false
}

// strongVersionTag reads one strong entity tag as etag writes it: a quoted decimal version of
// canonical form ("3"; not "03", "+3", ""3"" or W/"3"), since RFC 9110's strong comparison is
// byte for byte (8.8.3.2).
func strongVersionTag(h string) (int64, bool) {
	if len(h) < 3 || h[0] != '"' || h[len(h)-1] != '"' {
		return 0, false
	}
	v, err := strconv.ParseInt(h[1:len(h)-1], 10, 64)
	return v, err == nil && v > 0 && etag(v) == h // etag's own spelling, and no other
}

// current reads event id as SQL holds it now, for a write conditional on ifVersion (ifMatch's):
// it writes the problem and returns false when the event does not exist (404; 412 when
// If-Match was sent: no current version matches, RFC 9110 13.1.1), when its version is not
// ifVersion (412 with the current ETag), or when the database does not answer.
func (a *API) current(w http.ResponseWriter, r *http.Request, id string, ifVersion int64) (event.Event, bool) {
	cur, err := a.cfg.Registry.Fresh(r.Context(), id)
	switch {
	case errors.Is(err, registry.ErrNotFound) && ifVersion == event.UpdateOnly:
		writeNoSuchForIfMatch(w, id)
	case errors.Is(err, registry.ErrNotFound) && ifVersion > 0:
		a.StoreError(w, &event.VersionError{}, id)
	case err != nil:
		a.StoreError(w, err, id)
	case ifVersion > 0 && ifVersion != cur.Version:
		a.StoreError(w, &event.VersionError{Current: cur.Version}, id)
	default:
		return cur, true
	}
	return event.Event{}, false
}

// writeNoSuchForIfMatch answers a write with If-Match: * to an event that does not exist: 412
// (RFC 9110 13.1.1: "*" is false when there is no current representation).
func writeNoSuchForIfMatch(w http.ResponseWriter, id string) {
	httpjson.WriteProblem(w, httpjson.NewProblem(412, "precondition_failed",
		"no event "+id+": If-Match: * is met only by an existing event (without If-Match a PUT creates one)"))
}

// bodyOf is e as a PUT body, the document a PATCH merges into.
func bodyOf(e event.Event) eventBody {
	secs := func(d time.Duration) *int64 { v := int64(d / time.Second); return &v }
	b := eventBody{
		Name: e.Name, MaxActive: &e.MaxActive, AdmitRate: e.AdmitRate, RedirectURL: e.RedirectURL,
		Paused: e.Paused, PauseMessage: e.PauseMessage,
		SessionTTLS: secs(e.SessionTTL), ClaimTTLS: secs(e.ClaimTTL),
		MaxPerBooking: &e.MaxPerBooking, HoldTTLS: secs(e.HoldTTL), PrequeueOrder: e.PrequeueOrder,
		// Every field PUT takes, so that a PATCH of one keeps the others.
		Limits: limitsView(e.Limits), IdentityRequired: e.IdentityRequired, MaxPerUser: maxPerUser(e.MaxPerUser),
		SessionMaxS: secs(e.SessionMax), Page: pageView(e.Page), Challenge: challengeConfigView(e.Challenge),
		AdmissionMode: e.Mode(), Auto: autoView(e.Auto),
	}
	if !e.OpensAt.IsZero() {
		b.OpensAt = &e.OpensAt
	}
	if !e.ClosesAt.IsZero() {
		b.ClosesAt = &e.ClosesAt
	}
	if e.Capacity > 0 {
		b.Capacity = &e.Capacity
	}
	switch {
	case e.SeatMap != "":
		var m event.SeatMap
		if json.Unmarshal([]byte(e.SeatMap), &m) == nil {
			b.SeatMap = &m
			b.Capacity = nil // derived from the seats
			break
		}
		fallthrough
	case len(e.Seats) > 0:
		b.Seats = e.Seats
		b.Capacity = nil
	}
	return b
}

// knownEvent returns the event id names, from the registry's cache (at most a second old), or
// writes the store's error (404 event_not_found, 503 store_unavailable) and reports false.
func (a *API) knownEvent(w http.ResponseWriter, r *http.Request, id string) (event.Event, bool) {
	e, err := a.cfg.Registry.Get(r.Context(), id)
	if err != nil {
		a.StoreError(w, err, id)
		return event.Event{}, false
	}
	return e, true
}

func (a *API) getEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	e, ok := a.knownEvent(w, r, id)
	if !ok {
		return
	}
	st, err := a.cfg.Line.Stats(r.Context(), e.ID)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	if e.Auto.HealthURL != "" && !a.readsPrivate(r) {
		// The origin's own health URL (it may carry a token in its query) is the operator's:
		// anyone may read the event, only a key with at least the read-only role sees it.
		e.Auto.HealthURL = ""
	}
	v, err := a.withSale(r, a.eventView(e, st), e)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	w.Header().Set("ETag", etag(e.Version))
	httpjson.WriteJSON(w, 200, v)
}

func (a *API) deleteEvent(w http.ResponseWriter, r *http.Request, who Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	dropSold := false
	if v, given := r.URL.Query()["drop_sold"]; given {
		if len(v) != 1 || v[0] != "true" {
			httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "drop_sold, when given, is true (once): delete the event's confirmed bookings with it"))
			return
		}
		dropSold = true
	}
	ifVersion, ok := a.ifMatch(w, r, id)
	if !ok {
		return
	}
	cur, ok := a.current(w, r, id, ifVersion)
	if !ok {
		return
	}
	if ifVersion != 0 {
		ifVersion = cur.Version // the version checked: deleted only if nothing changed it since
	}
	if err := a.cfg.Registry.DeleteIf(r.Context(), id, ifVersion, dropSold); err != nil {
		a.StoreError(w, err, id)
		return
	}
	a.Audit(r, who, "event.delete", id, auditView(cur), nil)
	w.WriteHeader(http.StatusNoContent)
}

// closeEvent serves POST /v1/events/{event_id}/close (admin): the event closes now, as at its
// closes_at: joins are refused and waiting tickets read CLOSED. A pre-queue not opened yet is
// closed too (opens_at is cleared). Answers as GET.
func (a *API) closeEvent(w http.ResponseWriter, r *http.Request, who Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	// No body, or {}: a member (closes_at, say, meant to schedule the close, which is PATCH's)
	// or broken JSON is refused as every body of the API is, not ignored by closing at once.
	var none struct{}
	if !httpjson.ReadJSON(w, r, 1<<10, &none, true) {
		return
	}
	ifVersion, ok := a.ifMatch(w, r, id)
	if !ok {
		return
	}
	cur, ok := a.current(w, r, id, ifVersion)
	if !ok {
		return
	}
	before := cur
	now := a.cfg.Now().UTC()
	if cur.ClosesAt.IsZero() || cur.ClosesAt.After(now) {
		cur.ClosesAt = now
		if !cur.OpensAt.Before(now) {
			cur.OpensAt = time.Time{}
		}
	}
	a.writeEvent(w, r, who, id, bodyOf(cur), cur.Version, "event.close", &before, false)
}

// extendBody is the JSON of POST /v1/events/{event_id}/extend.
type extendBody struct {
	Seconds int64 `json:"seconds"` // 1..86400
}

// extendSessions serves POST /v1/events/{event_id}/extend (admin): every live admitted
// session gets seconds more (after an outage of the shop, say): {"extended": n}.
func (a *API) extendSessions(w http.ResponseWriter, r *http.Request, who Actor) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	var b extendBody
	if !httpjson.ReadJSON(w, r, 1<<10, &b, false) {
		return
	}
	if b.Seconds < 1 || b.Seconds > int64(event.MaxTTL/time.Second) {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "seconds must be between 1 and 86400"))
		return
	}
	n, err := a.cfg.Line.Extend(r.Context(), id, time.Duration(b.Seconds)*time.Second)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	a.Audit(r, who, "event.extend", id, nil, map[string]int64{"seconds": b.Seconds, "extended": n})
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"event_id": id, "extended": n, "seconds": b.Seconds})
}
