package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/token"
)

// joinBody is the optional JSON of POST /v1/events/{event_id}/tickets.
type joinBody struct {
	// UserID names the user; honoured only with the admin key (server-to-server joins).
	UserID string `json:"user_id"`
	// Identity is a JWT the integrating site signed for its user (sub = user id).
	Identity string `json:"identity"`
	// Challenge and Solution are a solved proof-of-work challenge of the event (GET
	// /v1/events/{event_id}/challenge), for an event with "challenge": {"type": "pow"}.
	Challenge string `json:"challenge"`
	Solution  string `json:"solution"`
	// CaptchaToken is the token of the operator's captcha widget, for an event with
	// "challenge": {"type": "external"} (Turnstile's cf-turnstile-response, hCaptcha's
	// h-captcha-response).
	CaptchaToken string `json:"captcha_token"`
}

// maxUserID is the longest user id accepted (bytes).
const maxUserID = 128

func (a *API) join(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	if !a.OriginAllowed(r) {
		httpjson.WriteProblem(w, httpjson.NewProblem(403, "origin_not_allowed",
			"joins from pages of "+r.Header.Get("Origin")+" are not allowed (--allowed-origins)"))
		return
	}
	var b joinBody
	if r.ContentLength != 0 && !httpjson.ReadSmallJSON(w, r, maxJoinBody, &b, true) {
		return
	}
	var userKey string
	admin := false
	switch {
	case b.UserID != "" && b.Identity != "":
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "give user_id or identity, not both"))
		return
	case b.UserID != "":
		if _, ok, retry := a.checkAdmin(r); !ok {
			if retry > 0 {
				httpjson.WriteProblem(w, httpjson.RateLimited(retry, "too many failed admin authentications from this address"))
				return
			}
			httpjson.WriteProblem(w, httpjson.NewProblem(401, "admin_key_required", "user_id is honoured only on joins made with the admin key; browsers send an identity token instead"))
			return
		}
		if len(b.UserID) > maxUserID || !event.ValidText(b.UserID) {
			httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "user_id must be at most 128 bytes of UTF-8 text without control characters"))
			return
		}
		userKey = token.UserKey(b.UserID)
		admin = true
	case b.Identity != "":
		if a.cfg.Identity == nil {
			httpjson.WriteProblem(w, httpjson.NewProblem(422, "identity_not_supported", "this instance has no identity key (WAITROOM_IDENTITY_KEY or WAITROOM_IDENTITY_PUBLIC_KEY)"))
			return
		}
		uid, err := a.cfg.Identity.Verify(b.Identity, a.cfg.Now())
		if err != nil {
			httpjson.WriteProblem(w, httpjson.NewProblem(401, "invalid_identity", "the identity token is invalid: "+tokenReason(err)))
			return
		}
		userKey = token.UserKey(uid)
	}
	e, ok := a.cfg.Registry.Cached(id)
	if !ok {
		var err error
		if e, err = a.cfg.Registry.Get(r.Context(), id); err != nil {
			a.StoreError(w, err, id)
			return
		}
	}
	if e.IdentityRequired && userKey == "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(401, "identity_required",
			"event "+id+" admits only identified people: join with {\"identity\": \"<JWT>\"} signed by the site"))
		return
	}
	p := queue.JoinParams{Event: id, UserKey: userKey}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if !validIdempotencyKey(key) {
			httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_idempotency_key",
				"Idempotency-Key must be 1 to 128 printable ASCII characters"))
			return
		}
		p.IdempotencyKey = token.IdempotencyKey(key)
	}
	var refusal string
	// Server-to-server joins (admin key) come from few addresses on purpose, and are trusted to
	// be no bots: neither limited per client nor challenged.
	if !admin {
		p.ClientKey, p.JoinLimit, p.JoinWindow = a.ClientKey(r), e.Limits.JoinsPerClient, e.Limits.JoinWindow
		// A client the store refused is refused here until its window ends: a bot joining at
		// full speed costs no store call (the store counts its window's joins exactly anyway).
		refusal = "join:" + id + "\x00" + p.ClientKey
		if left, refused := a.refusals.Refused(refusal); refused {
			a.StoreError(w, &queue.RateLimitedError{RetryAfter: left}, id)
			return
		}
		if prob := a.checkChallenge(r, e, b, &p); prob != nil {
			httpjson.WriteProblem(w, prob)
			return
		}
	}
	t, err := a.cfg.Store.Join(r.Context(), p)
	if rl := (*queue.RateLimitedError)(nil); refusal != "" && errors.As(err, &rl) {
		a.refusals.Refuse(refusal, rl.RetryAfter)
	}
	if errors.Is(err, queue.ErrEventNotFound) {
		if err = a.restoreLine(r, id); err == nil {
			t, err = a.cfg.Store.Join(r.Context(), p)
		}
	}
	if errors.Is(err, queue.ErrChallengeUsed) {
		httpjson.WriteProblem(w, challengeUsed(id, p))
		return
	}
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	code := http.StatusOK
	result := "existing"
	if t.Created {
		code = http.StatusCreated
		result = "queued"
		if t.Status == queue.StatusAdmitted {
			result = "admitted"
			a.cfg.Metrics.Admissions.WithLabelValues(id, "join").Inc()
			a.cfg.Metrics.TimeInQueue.WithLabelValues(id).Observe(0) // admitted at once: no wait
		}
	}
	a.cfg.Metrics.Joins.WithLabelValues(id, result).Inc()
	a.writeTicket(w, code, t)
}

// validIdempotencyKey reports whether key is 1 to token.MaxIdempotencyKeyLen printable ASCII
// characters (what a client generates: a UUID, a random token).
func validIdempotencyKey(key string) bool {
	if len(key) == 0 || len(key) > token.MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// ticketRef decodes the path's ticket id; an id that does not verify is an unknown ticket.
func (a *API) ticketRef(w http.ResponseWriter, r *http.Request) (queue.TicketRef, bool) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return queue.TicketRef{}, false
	}
	ref, err := a.cfg.Tickets.Decode(id, r.PathValue("ticket_id"))
	if err != nil {
		httpjson.WriteProblem(w, httpjson.NewProblem(404, "ticket_not_found", "no such ticket in event "+id))
		return queue.TicketRef{}, false
	}
	return ref, true
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	ref, ok := a.ticketRef(w, r)
	if !ok {
		return
	}
	t, err := a.poll(r, ref)
	if errors.Is(err, queue.ErrEventNotFound) {
		// The store lost the line (a Redis restart, a crash of the embedded process): it comes
		// back from SQL with its numbers (docs/durability.md) and the ticket reads again.
		if err = a.restoreLine(r, ref.Event); err == nil {
			t, err = a.poll(r, ref)
		}
	}
	if err != nil {
		var rl *queue.RateLimitedError
		if errors.As(err, &rl) {
			httpjson.WriteProblem(w, httpjson.RateLimited(rl.RetryAfter, "this ticket asks for its status far more often than poll_after_s says"))
			return
		}
		a.StoreError(w, err, ref.Event)
		return
	}
	var bookingID string
	if t.Status == queue.StatusCompleted && a.sale.BookingOf != nil {
		bookingID = a.sale.BookingOf(r.Context(), ref.Event, r.PathValue("ticket_id"))
	}
	a.writeTicketBooking(w, http.StatusOK, t, bookingID)
}

// poll reads the ticket counted against the event's polls_per_ticket, in the store's status
// step (exact across instances); a *queue.RateLimitedError over it. A ticket refused is
// remembered here until its window ends, so that its next reads cost no store call.
func (a *API) poll(r *http.Request, ref queue.TicketRef) (queue.Ticket, error) {
	var kb [96]byte
	key := append(append(kb[:0], "poll:"...), ref.Event...)
	key = strconv.AppendUint(append(key, ':'), uint64(ref.Generation), 10)
	key = strconv.AppendInt(append(key, ':'), ref.Number, 10)
	if left, refused := a.refusals.Refused(string(key)); refused {
		return queue.Ticket{}, &queue.RateLimitedError{RetryAfter: left}
	}
	e, ok := a.cfg.Registry.Cached(ref.Event)
	if !ok {
		e = event.Event{ID: ref.Event}.WithDefaults()
	}
	t, err := a.cfg.Store.Poll(r.Context(), queue.PollParams{Ref: ref, Limit: e.Limits.PollsPerTicket, Window: e.Limits.PollWindow})
	var rl *queue.RateLimitedError
	if errors.As(err, &rl) {
		a.refusals.Refuse(string(key), rl.RetryAfter)
	}
	return t, err
}

func (a *API) leave(w http.ResponseWriter, r *http.Request) {
	ref, ok := a.ticketRef(w, r)
	if !ok {
		return
	}
	err := a.cfg.Store.Leave(r.Context(), ref)
	if errors.Is(err, queue.ErrEventNotFound) {
		if err = a.restoreLine(r, ref.Event); err == nil {
			err = a.cfg.Store.Leave(r.Context(), ref)
		}
	}
	if err != nil {
		a.StoreError(w, err, ref.Event)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// admission answers a back end's online check of an admission token: 200 while the admitted
// session is live (and the check counts as its activity), 401 otherwise.
func (a *API) admission(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	ref, claims, p := a.VerifyAdmission(r, id)
	if p != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="waitroom admission"`)
		httpjson.WriteProblem(w, p)
		return
	}
	t, err := a.cfg.Store.Status(r.Context(), ref)
	if errors.Is(err, queue.ErrTicketNotFound) {
		httpjson.WriteProblem(w, httpjson.NewProblem(401, "admission_not_live", "the ticket left the event"))
		return
	}
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	if t.Status != queue.StatusAdmitted {
		p := httpjson.NewProblem(401, "admission_not_live", "the admission is "+string(t.Status))
		p.Extra = map[string]any{"ticket_status": t.Status}
		httpjson.WriteProblem(w, p)
		return
	}
	httpjson.WriteJSON(w, 200, map[string]any{
		"event_id": id, "ticket_id": claims.TicketID, "number": t.Number, "status": t.Status,
		"admitted_until": t.AdmittedUntil.Format(httpjson.TimeLayout),
	})
}

// tokenReason is the short reason of a token error ("expired", "bad signature", "malformed"),
// without the library's internals.
func tokenReason(err error) string {
	msg := err.Error()
	for _, p := range []string{"token: bad admission token: ", "token: bad identity token: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if i := strings.Index(msg, ":"); i > 0 {
		msg = msg[:i]
	}
	return msg
}

// VerifyAdmission checks the request's bearer admission token offline: signature, expiry,
// event, and that it names a ticket of this event. It does not ask the store whether the
// session is still live. On failure it returns a 401 problem (code invalid_token).
func (a *API) VerifyAdmission(r *http.Request, eventID string) (queue.TicketRef, token.AdmissionClaims, *httpjson.Problem) {
	raw, ok := httpjson.Bearer(r)
	if !ok {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "this call needs Authorization: Bearer <admission token>")
	}
	claims, err := a.cfg.Admissions.Verify(raw, a.cfg.Now())
	if err != nil {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "the admission token is invalid: "+tokenReason(err))
	}
	if claims.Event != eventID {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "the token is for event "+claims.Event)
	}
	ref, err := a.cfg.Tickets.Decode(eventID, claims.TicketID)
	if err != nil {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "the token names no ticket of this event")
	}
	return ref, claims, nil
}

// pollAfter says how long a queued client should wait before asking again (s): half its ETA
// (so that an admission is picked up soon after it happens and the slot is not held idle),
// position/200 s far back, between 1 s and 30 s, and never more than a third of the claim TTL
// so nobody loses an admission by polling too late. A line of 100,000 then costs at most about
// 200·(1+ln 30) + 100,000/30 ≈ 4,000 polls per second, whatever its admit_rate. A ticket of a
// pre-queue whose draw is pending (position 0) is paced as the last of the line.
func pollAfter(t queue.Ticket, eta int64, claimTTL time.Duration) int64 {
	if t.Status == queue.StatusAdmitted {
		left := t.AdmittedUntil.Sub(t.Now).Seconds() / 3
		return int64(math.Max(1, math.Min(30, left)))
	}
	if t.Status != queue.StatusQueued {
		return 0
	}
	pos := t.Position
	if pos == 0 {
		pos = t.Waiting
	}
	p := math.Ceil(float64(pos) / 200)
	if eta >= 0 && float64(eta)/2 < p {
		p = math.Floor(float64(eta) / 2)
	}
	ceiling := math.Min(30, math.Floor(claimTTL.Seconds()/3))
	return int64(math.Max(1, math.Min(ceiling, p)))
}

// writeTicket writes the ticket JSON. It is the hottest response of the service, so it is
// appended by hand into a pooled buffer, the ticket id encoded in place: no reflection, and no
// allocation of ours for a waiting ticket (an admitted one adds its token).
//
//	{"ticket_id","event_id","status","number","position","waiting","serving","eta_s",
//	 "poll_after_s","admission_token","admitted_until"[,"booking_id"]}
func (a *API) writeTicket(w http.ResponseWriter, code int, t queue.Ticket) {
	a.writeTicketBooking(w, code, t, "")
}

// writeTicketBooking is writeTicket with the booking id of a COMPLETED ticket ("" = none).
func (a *API) writeTicketBooking(w http.ResponseWriter, code int, t queue.Ticket, bookingID string) {
	e, ok := a.cfg.Registry.Cached(t.Event)
	if !ok {
		e = event.Event{ID: t.Event}.WithDefaults() // not synced yet: the measured rate alone
	}
	eta := int64(-1)
	if t.Status == queue.StatusQueued {
		eta = e.ETA(t.Position, t.Rate, t.Now)
	}
	var tok string
	if t.Status == queue.StatusAdmitted {
		var err error
		tok, err = a.cfg.Admissions.MintUser(t.Event, a.cfg.Tickets.Encode(t.TicketRef), t.Number, t.UserKey, t.AdmittedUntil, t.Now)
		if err != nil {
			httpjson.WriteProblem(w, httpjson.NewProblem(500, "internal_error", "could not sign the admission"))
			return
		}
	}
	bp := bodyPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"ticket_id":"`...)
	b = a.cfg.Tickets.AppendEncode(b, t.TicketRef)
	b = append(b, `","event_id":"`...)
	b = append(b, t.Event...) // event ids are [a-z0-9_-]: nothing to escape
	b = append(b, `","status":"`...)
	b = append(b, t.Status...)
	b = append(b, `","number":`...)
	b = strconv.AppendInt(b, t.Number, 10)
	b = append(b, `,"position":`...)
	b = strconv.AppendInt(b, t.Position, 10)
	b = append(b, `,"waiting":`...)
	b = strconv.AppendInt(b, t.Waiting, 10)
	b = append(b, `,"serving":`...)
	b = strconv.AppendInt(b, t.Serving, 10)
	b = append(b, `,"eta_s":`...)
	if eta >= 0 {
		b = strconv.AppendInt(b, eta, 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"poll_after_s":`...)
	b = strconv.AppendInt(b, pollAfter(t, eta, e.ClaimTTL), 10)
	b = append(b, `,"admission_token":`...)
	if tok != "" {
		b = append(b, '"')
		b = append(b, tok...) // base64url and dots
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"admitted_until":`...)
	if !t.AdmittedUntil.IsZero() {
		b = append(b, '"')
		b = t.AdmittedUntil.UTC().AppendFormat(b, httpjson.TimeLayout)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	if bookingID != "" {
		b = append(b, `,"booking_id":`...)
		b = strconv.AppendQuote(b, bookingID)
	}
	b = append(b, "}"...)
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	h["Content-Length"] = contentLength(len(b))
	w.WriteHeader(code)
	_, _ = w.Write(b) // Write does not keep b (io.Writer), so the buffer goes back to the pool
	if cap(b) <= 4096 {
		*bp = b
		bodyPool.Put(bp)
	}
}

var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
	// bodyPool holds the buffers writeTicket appends a ticket into.
	bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}
	// contentLengths[n] is the Content-Length header value n, for the body sizes of tickets
	// (shared: a header value slice is read, or replaced, never written in place).
	contentLengths = func() (t [1024][]string) {
		for n := range t {
			t[n] = []string{strconv.Itoa(n)}
		}
		return t
	}()
)

// contentLength returns the header value of a body of n bytes.
func contentLength(n int) []string {
	if n < len(contentLengths) {
		return contentLengths[n]
	}
	return []string{strconv.Itoa(n)}
}
