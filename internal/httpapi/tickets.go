package httpapi

import (
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/token"
)

// joinBody is the optional JSON of POST /v1/events/{event_id}/tickets.
type joinBody struct {
	// UserID names the user; honoured only with the admin key (server-to-server joins). Given,
	// it is not empty (an empty one was an anonymous join, and without the key not refused).
	UserID *string `json:"user_id"`
	// Identity is a JWT the integrating site signed for its user (sub = user id). Given, it is
	// not empty (an empty one was an anonymous join: a site that failed to make its user's
	// token would have had them join without a name).
	Identity *string `json:"identity"`
	// Challenge and Solution are a solved proof-of-work challenge of the event (GET
	// /v1/events/{event_id}/challenge), for an event with "challenge": {"type": "pow"}.
	Challenge string `json:"challenge"`
	Solution  string `json:"solution"`
	// CaptchaToken is the token of the operator's captcha widget, for an event with
	// "challenge": {"type": "external"} (Turnstile's cf-turnstile-response, hCaptcha's
	// h-captcha-response).
	CaptchaToken string `json:"captcha_token"`
}

// decodePlain decodes body into b when it is the plain shape a page or a bot-guarded client
// sends: one object whose members are challenge, solution and captcha_token, each at most once,
// each a string of printable ASCII without escapes (a proof of work's challenge and solution,
// a captcha token), with JSON's whitespace around the tokens. For such a body the result is
// httpjson.DecodeJSON's, in one allocation and a fraction of its time (BenchmarkJoinBody); any
// other body (user_id, identity, an escape, a name twice, anything malformed) returns false
// with b untouched, for DecodeJSON to decode or refuse with its problem.
func (b *joinBody) decodePlain(body []byte) bool {
	s := string(body) // the values below are substrings of this one copy
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return false
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return skipSpace(s, i+1) == len(s)
	}
	var v [3]string
	var seen [3]bool
	for {
		name, j, ok := plainString(s, i)
		if !ok {
			return false
		}
		f := -1
		switch name {
		case "challenge":
			f = 0
		case "solution":
			f = 1
		case "captcha_token":
			f = 2
		}
		if f < 0 || seen[f] {
			return false
		}
		j = skipSpace(s, j)
		if j == len(s) || s[j] != ':' {
			return false
		}
		if v[f], j, ok = plainString(s, skipSpace(s, j+1)); !ok {
			return false
		}
		seen[f] = true
		j = skipSpace(s, j)
		switch {
		case j < len(s) && s[j] == ',':
			i = skipSpace(s, j+1)
		case j < len(s) && s[j] == '}' && skipSpace(s, j+1) == len(s):
			b.Challenge, b.Solution, b.CaptchaToken = v[0], v[1], v[2]
			return true
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte of s from i on that is not JSON's whitespace
// (RFC 8259 §2: space, tab, line feed, carriage return), or len(s).
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the JSON string at s[i:] when it holds only printable ASCII (0x20-0x7e)
// without a backslash: its contents and the index after its closing quote.
func plainString(s string, i int) (string, int, bool) {
	if i == len(s) || s[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", 0, false
		}
	}
	return "", 0, false
}

func (a *API) join(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	var b joinBody
	if r.ContentLength != 0 {
		body, ok := httpjson.ReadBody(w, r, maxJoinBody, true)
		if !ok || (body != nil && !b.decodePlain(body) && !httpjson.DecodeJSON(w, body, &b)) {
			return
		}
	}
	if b.UserID != nil && *b.UserID == "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", "user_id, when given, names a user: it is not empty"))
		return
	}
	if b.Identity != nil && *b.Identity == "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(422, "invalid_field", token.EmptyIdentity))
		return
	}
	idem, one := httpjson.OnlyValue(r.Header, "Idempotency-Key")
	if !one {
		// Two keys name two attempts: which one a retry finds would be a guess.
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_idempotency_key", token.OneIdempotencyKey))
		return
	}
	_, idemSent := r.Header["Idempotency-Key"]
	req := line.JoinRequest{Event: id, IdempotencyKey: idem, IdempotencyKeySent: idemSent,
		Proof: line.Proof{Challenge: b.Challenge, Solution: b.Solution, CaptchaToken: b.CaptchaToken}}
	if b.UserID != nil {
		req.UserID = *b.UserID
	}
	if b.Identity != nil {
		req.Identity = *b.Identity
	}
	if _, auth := r.Header["Authorization"]; auth || req.UserID != "" {
		// The admin key is HTTP's to check (its bearer and its failures per address); the line
		// knows only that the join was made with it (not counted against a client's limits),
		// and refuses user_id without it (401 admin_key_required). A key sent that does not
		// verify is refused, not taken for an anonymous join.
		switch _, p := a.Authenticate(r, admin.RoleOperator); {
		case p == nil:
			req.Admin = true
		case p.Status != http.StatusUnauthorized || auth:
			httpjson.WriteProblem(w, p)
			return
		}
	}
	if !req.Admin {
		req.Client = a.cfg.Clients.Addr(r)
	}
	t, err := a.cfg.Line.Join(r.Context(), req)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	code := http.StatusOK
	if t.Created {
		code = http.StatusCreated
	}
	a.writeTicket(w, code, t)
}

// ticketRef decodes the path's ticket id; an id that does not verify is an unknown ticket.
func (a *API) ticketRef(w http.ResponseWriter, r *http.Request) (queue.TicketRef, bool) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return queue.TicketRef{}, false
	}
	ref, err := a.cfg.Line.Ref(id, r.PathValue("ticket_id"))
	if err != nil {
		a.StoreError(w, err, id)
		return queue.TicketRef{}, false
	}
	return ref, true
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	ref, ok := a.ticketRef(w, r)
	if !ok {
		return
	}
	t, err := a.cfg.Line.Poll(r.Context(), ref)
	if err != nil {
		a.StoreError(w, err, ref.Event)
		return
	}
	var bookingID string
	if t.Status == queue.StatusCompleted && a.sale.BookingOf != nil {
		bookingID = a.sale.BookingOf(r.Context(), ref.Event, r.PathValue("ticket_id"))
	}
	a.writeTicketBooking(w, http.StatusOK, t, bookingID)
}

func (a *API) leave(w http.ResponseWriter, r *http.Request) {
	ref, ok := a.ticketRef(w, r)
	if !ok {
		return
	}
	if err := a.cfg.Line.Leave(r.Context(), ref); err != nil {
		a.StoreError(w, err, ref.Event)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// admission answers a back end's online check of an admission token: 200 while the admitted
// session is live (and the check counts as its activity), 401 otherwise. With ?client=<the
// visitor's address> (what the gate middleware sends) the address counts as using the
// admission (line.Service.Bind): 403 admission_shared from one address too many.
func (a *API) admission(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	q, ok := httpjson.Query(w, r, "client")
	if !ok {
		return
	}
	var client netip.Addr
	if c, given := q["client"]; given {
		// Given, it names an address: an empty one (an integrator whose lookup of the visitor
		// found nothing) is refused, not taken for no client, which would count no address
		// against addresses_per_admission.
		var err error
		if client, err = netip.ParseAddr(c[0]); err != nil {
			httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "client must be an IP address (the visitor's)"))
			return
		}
	}
	ref, claims, p := a.VerifyAdmission(r, id)
	if p != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="waitroom admission"`)
		httpjson.WriteProblem(w, p)
		return
	}
	t, err := a.cfg.Line.Status(r.Context(), ref)
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
	if err := a.cfg.Line.Bind(r.Context(), ref, client); err != nil {
		a.StoreError(w, err, id)
		return
	}
	httpjson.WriteJSON(w, 200, map[string]any{
		"event_id": id, "ticket_id": claims.TicketID, "number": t.Number, "status": t.Status,
		"admitted_until": t.AdmittedUntil.Format(httpjson.TimeLayout),
	})
}

// VerifyAdmission checks the request's bearer admission token offline: signature, expiry,
// event, and that it names a ticket of this event. It does not ask the store whether the
// session is still live. On failure it returns a 401 problem (code invalid_token).
func (a *API) VerifyAdmission(r *http.Request, eventID string) (queue.TicketRef, token.AdmissionClaims, *httpjson.Problem) {
	raw, ok := httpjson.Bearer(r)
	if !ok {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "this call needs one Authorization: Bearer <admission token> header")
	}
	claims, err := a.cfg.Admissions.Verify(raw, a.cfg.Now())
	if err != nil {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "the admission token is invalid: "+line.TokenReason(err))
	}
	if claims.Event != eventID {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "the token is for event "+claims.Event)
	}
	ref, err := a.cfg.Line.Ref(eventID, claims.TicketID)
	if err != nil {
		return queue.TicketRef{}, token.AdmissionClaims{}, httpjson.NewProblem(401, "invalid_token", "the token names no ticket of this event")
	}
	return ref, claims, nil
}

// SignedAdmission reports whether r's bearer is an admission token this service signed, of any
// event, expired or not: a visitor's credential, never an attempt at the admin key (a route
// that takes both counts only other bearers as failed admin authentications).
func (a *API) SignedAdmission(r *http.Request) bool {
	raw, ok := httpjson.Bearer(r)
	if !ok {
		return false
	}
	_, err := a.cfg.Admissions.Verify(raw, a.cfg.Now())
	return err == nil || errors.Is(err, token.ErrTokenExpired)
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
	e := a.cfg.Line.Cached(t.Event) // not synced yet: the defaults and the measured rate
	eta := e.TicketETA(t)
	var tok string
	if t.Status == queue.StatusAdmitted {
		var err error
		tok, err = a.cfg.Admissions.MintUser(t.Event, a.cfg.Line.Tickets().Encode(t.TicketRef), t.Number, t.UserKey, t.AdmittedUntil, t.Now)
		if err != nil {
			httpjson.WriteProblem(w, httpjson.NewProblem(500, "internal_error", "could not sign the admission"))
			return
		}
	}
	bp := bodyPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"ticket_id":"`...)
	b = a.cfg.Line.Tickets().AppendEncode(b, t.TicketRef)
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
	b = strconv.AppendInt(b, e.PollAfter(t, eta), 10)
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
