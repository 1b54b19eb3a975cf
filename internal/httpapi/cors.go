package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/internal/httpjson"
)

// Cross-origin requests (CORS, https://fetch.spec.whatwg.org/#http-cors-protocol). A site whose
// origin --allowed-origins lists may join from its own page (the external captcha's flow,
// docs/challenge.md) and follow its ticket: its browser asks first (a preflight, for a JSON
// body or an Idempotency-Key) and then reads the answer only if it names the page's origin.
// Which origins pass is package origin's rule, the one the joins' 403 origin_not_allowed and the
// push handshake's 403 cross_origin apply; this only tells the browser. The admin API is never
// offered to another origin (the console is served by this origin), and no credentials
// (cookies) are asked for: a page sends its ticket id and admission token itself.
const (
	// corsAllowHeaders are the request headers a page of an allowed origin may send.
	corsAllowHeaders = "Content-Type, Idempotency-Key, Authorization, X-Request-Id"
	// corsExposeHeaders are the response headers such a page may read, beyond the safelisted.
	corsExposeHeaders = "Retry-After, ETag, Location, X-Request-Id"
	// corsMaxAge is how long a browser may keep a preflight's answer (s; browsers cap it at 2
	// hours, Chromium at 10 minutes).
	corsMaxAge = "600"
)

// corsRoutes are the routes a visitor's page on another site uses, and the only ones offered
// across origins (a list, so that a route added later is not offered until it is named here):
// the event's public view, its challenge and draw, a ticket's join, read, leave and SSE stream,
// the admission check, the sale's routes an admission token opens (seats, holds, bookings) and
// a campaign's entries. Not the admin API, /metrics, the console, the pages and their assets
// (a page is navigated to, not fetched), the JWKS, nor the gate's check (whose answers a proxy
// may hand to the protected site's visitors).
var corsRoutes = map[string]bool{
	"GET /v1/events/{event_id}":                            true,
	"GET /v1/events/{event_id}/challenge":                  true,
	"GET /v1/events/{event_id}/draw":                       true,
	"POST /v1/events/{event_id}/tickets":                   true,
	"GET /v1/events/{event_id}/tickets/{ticket_id}":        true,
	"DELETE /v1/events/{event_id}/tickets/{ticket_id}":     true,
	"GET /v1/events/{event_id}/tickets/{ticket_id}/events": true,
	"GET /v1/events/{event_id}/admission":                  true,
	"GET /v1/events/{event_id}/seats":                      true,
	"POST /v1/events/{event_id}/holds":                     true,
	"DELETE /v1/events/{event_id}/holds/{hold_id}":         true,
	"POST /v1/events/{event_id}/bookings":                  true,
	"GET /v1/events/{event_id}/bookings/{booking_id}":      true,
	"GET /v1/campaigns/{campaign_id}":                      true,
	"POST /v1/campaigns/{campaign_id}/entries":             true,
	"GET /v1/campaigns/{campaign_id}/entries/{user_id}":    true,
}

// originRoutes are the routes that put a visitor in a line, or hold a stream open for one,
// from a browser: a page of another site that --allowed-origins does not list is refused them
// (403 origin_not_allowed; a request without an Origin, server to server, is not affected),
// whatever the browser would let it read of the answer — the request alone takes a place, an
// entry or a push connection. Checked in one place (ServeHTTP) for every door of the API; the
// WebSocket's handshake is checked by package push (403 cross_origin).
var originRoutes = map[string]string{
	"POST /v1/events/{event_id}/tickets":                   "joins",
	"POST /v1/campaigns/{campaign_id}/entries":             "campaign entries",
	"GET /v1/events/{event_id}/tickets/{ticket_id}/events": "push streams",
}

// allowsCORS reports whether the answer to r, a request of pattern (a route of this API), may
// be read by the page that sent it: r names an Origin that the origin policy allows, on one of
// corsRoutes.
func (a *API) allowsCORS(r *http.Request, pattern string) bool {
	return corsRoutes[pattern] && a.cfg.Origins.Allowed(r)
}

// setCORS adds the headers that let the page of r's Origin read the answer.
func setCORS(h http.Header, r *http.Request) {
	h["Access-Control-Allow-Origin"] = r.Header["Origin"]
	h["Access-Control-Expose-Headers"] = []string{corsExposeHeaders}
}

// preflight answers a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
// of a path that has no OPTIONS route of its own: 204 with the method asked for, the headers
// a page may send and how long to keep the answer, when the origin is allowed and the method
// is one of corsRoutes on the path; 403 origin_not_allowed for an origin the policy refuses, or
// a route not offered across origins; 405 when the path has no such method.
func (a *API) preflight(w http.ResponseWriter, r *http.Request) {
	want := r.Header.Get("Access-Control-Request-Method")
	asked := r.Clone(r.Context())
	asked.Method = want
	_, pattern := a.mux.Handler(asked)
	h := w.Header()
	h["Vary"] = []string{"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"}
	switch {
	case pattern == "" || strings.ContainsAny(want, " \t,"):
		httpjson.WriteProblem(w, httpjson.NewProblem(405, "method_not_allowed", want+" is not allowed on "+r.URL.Path))
	case !corsRoutes[pattern] || !a.cfg.Origins.Check(r): // a route offered across origins, to an origin refused: noticed
		httpjson.WriteProblem(w, httpjson.NewProblem(403, "origin_not_allowed",
			originPages(r)+" may not call "+want+" "+r.URL.Path+" (--allowed-origins; the admin API is for this origin only)"))
	default:
		h["Access-Control-Allow-Origin"] = r.Header["Origin"]
		h["Access-Control-Allow-Methods"] = []string{want}
		h["Access-Control-Allow-Headers"] = []string{corsAllowHeaders}
		h["Access-Control-Max-Age"] = []string{corsMaxAge}
		w.WriteHeader(http.StatusNoContent)
	}
}

// originPages names the pages a refused cross-origin request came from, for a problem's
// detail: "pages of <Origin>", or, for a request with more than one Origin field (refused
// whatever they hold: which one a browser sent would be a guess), says so.
func originPages(r *http.Request) string {
	if o := r.Header.Values("Origin"); len(o) != 1 {
		return "a request with " + strconv.Itoa(len(o)) + " Origin fields"
	}
	return "pages of " + r.Header.Get("Origin")
}
