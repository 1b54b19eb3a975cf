// Package httpjson reads and writes the API's HTTP bodies: JSON requests with a size limit and
// unknown fields refused, JSON responses, and RFC 9457 problem details with the one table of
// stable problem codes (every code any handler writes has its title here). Table is the shape
// of each domain's one table from its errors to problems.
package httpjson

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem is an RFC 9457 problem detail. Code is stable and meant for programs; Title and
// Detail are for people. Extra members (conflicts, available, status) ride in Extra.
type Problem struct {
	Status int
	Code   string
	Title  string
	Detail string
	Extra  map[string]any
	// RetryAfter, when positive, is sent as the Retry-After header (whole seconds, rounded up)
	// and as the member retry_after_s. A 503 without it keeps a Retry-After the writer's
	// header holds already, or gets "1".
	RetryAfter time.Duration
	// Header holds response headers that come with the problem (the ETag of a 412).
	Header http.Header
	// Held: a refusal a client can repeat at full speed (challenge_failed), which the server
	// holds before sending it, as it holds every 429 (httpapi.Config.RefusalHold). WriteProblem
	// tells the writer (Holder) so.
	Held bool
}

// Holder is a response writer that holds refusals before it sends them (httpapi's): Hold asks
// it to hold the answer being written.
type Holder interface {
	Hold()
}

// RateLimited is the 429 problem (code rate_limited) of a limit per client: detail says which,
// retry when the client may try again.
func RateLimited(retry time.Duration, detail string) *Problem {
	p := NewProblem(http.StatusTooManyRequests, "rate_limited", detail)
	p.RetryAfter = max(retry, time.Second)
	return p
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// problemTitles gives each stable code its title; codes are documented in docs/api.md. A code
// missing here is a bug (TestEveryCodeHasATitle).
var problemTitles = map[string]string{
	"websocket_required":          "WebSocket handshake required",
	"too_many_ticket_connections": "Too many push connections for this ticket",
	"websocket_version":           "Unsupported WebSocket version",
	"invalid_handshake":           "Invalid WebSocket handshake",
	"cross_origin":                "Cross-origin WebSocket refused",
	"not_found":                   "No such resource",
	"method_not_allowed":          "Method not allowed",
	"invalid_event_id":            "Invalid event id",
	"event_not_found":             "Event not found",
	"ticket_not_found":            "Ticket not found",
	"body_too_large":              "Request body too large",
	"body_timeout":                "Request body incomplete",
	"malformed_json":              "Malformed JSON body",
	"invalid_field":               "Invalid field",
	"unauthorized":                "Admin key required",
	"admin_key_required":          "user_id needs the admin key",
	"invalid_identity":            "Invalid identity token",
	"identity_not_supported":      "Identity tokens are not configured",
	"invalid_token":               "Invalid admission token",
	"admission_not_live":          "Admission not live",
	"admission_shared":            "Admission used from too many addresses",
	"event_closed":                "Event closed",
	"sold_out":                    "Sold out",
	"store_unavailable":           "Service temporarily unavailable",
	"internal_error":              "Internal error",
	"invalid_idempotency_key":     "Invalid Idempotency-Key",
	"invalid_query":               "Invalid query parameter",
	"admin_key_exists":            "Admin key name taken",
	"admin_key_not_found":         "Admin key not found",
	"invalid_key_name":            "Invalid admin key name",
	"precondition_failed":         "Precondition failed",
	"would_drop_sold":             "The change would drop what was sold",
	// The sale and the coupon campaigns (package saleapi).
	"hold_conflict":          "Held or sold by someone else",
	"invalid_hold":           "Invalid hold",
	"not_for_sale":           "Event not for sale",
	"hold_not_found":         "Hold not found",
	"hold_expired":           "Hold expired",
	"hold_not_yours":         "Hold belongs to another ticket",
	"already_booked":         "Ticket booked already",
	"idempotency_key_reused": "Idempotency key reused",
	"booking_not_found":      "Booking not found",
	"forbidden":              "Not allowed",
	"campaign_not_found":     "Campaign not found",
	"campaign_not_open":      "Campaign not open yet",
	"entry_not_found":        "Entry not found",
	"user_required":          "A vouched user is required",
	"invalid_campaign_id":    "Invalid campaign id",
	"sale_restoring":         "Sale being restored",
	// Push (package push).
	"shutting_down":        "Instance shutting down",
	"too_many_connections": "Too many connections",
	// Protection against bots (issue 12).
	"rate_limited":       "Too many requests",
	"identity_required":  "This event needs an identity",
	"origin_not_allowed": "Origin not allowed",
	"purchase_limit":     "Purchase limit reached",
	"invalid_id":         "Invalid id",
	// The challenge of an event (docs/challenge.md).
	"challenge_required":    "A solved challenge is required",
	"challenge_failed":      "Challenge failed",
	"challenge_unavailable": "Challenge check unavailable",
	// The gate (package gateway).
	"waiting_room":         "Waiting in line",
	"origin_unavailable":   "Site behind the waiting room unavailable",
	"invalid_original_uri": "Invalid original URI",
	"invalid_path":         "Path refused",
	"invalid_host":         "Host refused",
	"invalid_header":       "Header reserved for the waiting room",
	"origin_timeout":       "Site behind the waiting room timed out",
	// A gate file's event that does not exist: the operator's mistake, not a store outage.
	"waiting_room_not_set_up": "Waiting room not set up",
	// Admin keys' roles (package admin).
	"insufficient_role":  "The admin key's role does not allow this",
	"insufficient_scope": "The admin key's events do not include this",
	"invalid_role":       "Invalid admin key role",

	// net/http's own answers to a request whose framing does not parse (FramingAnswer).
	"malformed_request":             "Malformed HTTP request",
	"header_too_large":              "Request header too large",
	"unsupported_transfer_encoding": "Unsupported transfer encoding",
	"unsupported_http_version":      "Unsupported HTTP version",
	"expectation_failed":            "Unsupported expectation",
}

// NewProblem returns the problem of a stable code, with its title from the table.
func NewProblem(status int, code, detail string) *Problem {
	return &Problem{Status: status, Code: code, Title: problemTitles[code], Detail: detail}
}

// WriteProblem writes p as application/problem+json; a Held problem asks the first Holder
// among w and the writers it wraps (Unwrap) to hold it.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	for u := w; p.Held; {
		if h, ok := u.(Holder); ok {
			h.Hold()
			break
		}
		in, ok := u.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		u = in.Unwrap()
	}
	h := w.Header()
	for k, vs := range p.Header {
		h[k] = vs
	}
	var secs int64
	if p.RetryAfter > 0 {
		secs = int64((p.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	} else if p.Status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1") // a 503 always says when to come back; the caller's, if it set one
	}
	b := p.body(secs)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// body is p's application/problem+json body: {"type","title","status","detail","code"}, its
// Extra, and retry_after_s when retry (seconds) is not 0.
func (p *Problem) body(retry int64) []byte {
	body := map[string]any{
		"type":   "urn:waitroom:problem:" + p.Code,
		"title":  p.Title,
		"status": p.Status,
		"detail": p.Detail,
		"code":   p.Code,
	}
	for k, v := range p.Extra {
		body[k] = v
	}
	if retry != 0 {
		body["retry_after_s"] = retry
	}
	b, _ := json.Marshal(body) // strings, numbers and the callers' Extra values: does not fail
	return b
}

// MuxMiss answers r as a problem where a ServeMux has no route for it: h is the handler the
// mux's Handler gave with an empty pattern (its own 404, or its 405 with Allow). The answer is
// 405 method_not_allowed (the mux's Allow header kept) or 404 not_found, so that every
// listener's misses are problems as its routes' refusals are.
func MuxMiss(w http.ResponseWriter, r *http.Request, h http.Handler) {
	rec := &captureWriter{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	if rec.code == http.StatusMethodNotAllowed {
		WriteProblem(w, NewProblem(405, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path))
		return
	}
	WriteProblem(w, NewProblem(404, "not_found", "no resource at "+r.URL.EscapedPath()))
}

// captureWriter keeps a handler's status and headers, and drops its body.
type captureWriter struct {
	header http.Header
	code   int
}

func (c *captureWriter) Header() http.Header         { return c.header }
func (c *captureWriter) Write(b []byte) (int, error) { return len(b), nil }
func (c *captureWriter) WriteHeader(code int)        { c.code = code }
