// Package gateway puts the waiting room in front of an existing site without changing it: a
// reverse proxy that sends the visitors of protected paths through an event's line (gate
// mode, `waitroom serve --gate FILE`), and the same decision as a forward-auth endpoint for
// nginx auth_request, Envoy ext_authz and Traefik ForwardAuth (GET /v1/gate/check).
//
// A visitor without a live admission joins the line in process (line.Service's Join, the one
// implementation of the line's rules every door calls, not an HTTP call) and gets the waiting-room page (an HTML request: a redirect to /e/{event} with the
// place and the URL to come back to) or a 503 problem+json with Retry-After (any other
// request). The place, and after admission the admission token, ride in one cookie per event,
// "waitroom_<event_id>" (HttpOnly, SameSite=Lax, Secure when the request came over HTTPS).
//
// The hot path of an admitted visitor touches no store: the token is verified offline (and the
// verification cached while it is fresh); every RefreshEvery (5 s by default) a request of the
// ticket counts as activity through the store's Status, which extends the session and gives a
// fresh token. An ended session (idle, completed, left) is noticed at that refresh, or at once
// on this instance when the origin ended it with the response header "Waitroom-Command:
// complete"; the next request joins the line again.
package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/origin"
	"github.com/waitroom/waitroom/internal/pathrule"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/token"
)

// Headers the origin receives with every request of an admitted visitor. Clients' own
// X-Waitroom-* headers, and the others an origin could read as the gate's (gateHeader), are
// removed before the gate sets these.
const (
	HeaderEvent         = "X-Waitroom-Event"
	HeaderTicket        = "X-Waitroom-Ticket"
	HeaderNumber        = "X-Waitroom-Number"         // the ticket number, decimal
	HeaderAdmittedUntil = "X-Waitroom-Admitted-Until" // RFC 3339 with ms, UTC
	// HeaderPosition, HeaderWaiting and HeaderETA come with the forward-auth check's 401 of a
	// visitor who waits, for a proxy that answers API clients itself (nginx's 503 problem, which
	// cannot read the check's body): the place in line (1: next), the users waiting, and the
	// estimated wait in s (absent while unknown), as the problem's position, waiting and eta_s.
	HeaderPosition = "X-Waitroom-Position"
	HeaderWaiting  = "X-Waitroom-Waiting"
	HeaderETA      = "X-Waitroom-Eta-S"
	// HeaderLocation is where the forward-auth check's 401 sends the visitor.
	HeaderLocation = "X-Waitroom-Location"
	// HeaderProblem is the code of the forward-auth check's problems but 401's (400:
	// invalid_path, invalid_host, invalid_header, invalid_original_uri; 404 not_found; 429
	// rate_limited; 410 event_closed, sold_out; 503 store_unavailable), for a proxy that does
	// not pass the check's body on (nginx turns them into its 500 otherwise).
	HeaderProblem = "X-Waitroom-Problem"
	// HeaderCommand is the origin's response header that ends the visitor's admitted session
	// ("complete"); the gate removes it from the response.
	HeaderCommand = "Waitroom-Command"
)

// RouteChecks are the forward-auth endpoint's routes, mounted on the service's API: one per
// method a proxy may call it with. nginx auth_request and Traefik ForwardAuth call it with GET
// (HEAD too, by the GET route) and say the original method in X-Forwarded-Method; Envoy's
// ext_authz HTTP service calls it with the original request's own method (it has no option to
// change it), so a POST to a protected checkout is checked with a POST, and so is a WebDAV
// PROPFIND or a TRACE. The decision is the same for every method: a protected path is protected
// whatever the method. The methods are listed for the API's document; the last route takes
// every other method (without it, Envoy's check of a PROPFIND to an unprotected page was a 405,
// and the page was refused).
var RouteChecks = []string{
	"GET /v1/gate/check",
	"POST /v1/gate/check",
	"PUT /v1/gate/check",
	"PATCH /v1/gate/check",
	"DELETE /v1/gate/check",
	"OPTIONS /v1/gate/check",
	"/v1/gate/check",
}

// waitroomPaths are the service's own paths, which the gate does not proxy: under them it
// serves the waiting room's public routes (PublicRoutes) and answers 404 to everything else.
var waitroomPaths = []string{"/e/", "/assets/", "/v1/events/", "/v1/gate/", "/.well-known/jwks.json"}

// waitroomPath returns the service's own path (waitroomPaths) that the clean path p is under,
// or "": the gate serves such a path itself, never the origin.
func waitroomPath(p string) string {
	for _, wp := range waitroomPaths {
		if strings.HasPrefix(p, wp) {
			return wp
		}
	}
	return ""
}

// PublicRoutes are the routes of the service's API that the gate's listener serves (issue 20,
// item 10): what the waiting-room page of a visitor uses — the page and its assets (the event's
// page.css too), the event's public view, the challenge, the draw's record, a ticket's join,
// read and leave, its push streams (WebSocket, SSE), and the JWKS that verifies admission tokens. The admin API (event
// writes, close, extend, history, audit, keys), the sale's routes and the forward-auth check
// stay on the API's own listener (--addr): under waitroomPaths the gate answers them 404.
var PublicRoutes = []string{
	"GET /e/{event_id}",
	"GET /e/{event_id}/page.css",
	"GET /assets/{name}",
	"GET /v1/events/{event_id}",
	"GET /v1/events/{event_id}/challenge",
	"GET /v1/events/{event_id}/draw",
	"POST /v1/events/{event_id}/tickets",
	"GET /v1/events/{event_id}/tickets/{ticket_id}",
	"DELETE /v1/events/{event_id}/tickets/{ticket_id}",
	"GET /v1/events/{event_id}/tickets/{ticket_id}/ws",
	"GET /v1/events/{event_id}/tickets/{ticket_id}/events",
	"GET /.well-known/jwks.json",
}

// DefaultOriginTimeout is how long the gate waits for an origin's response headers when the
// gate file sets no origin_timeout_s: 30 s. A checkout's slowest ordinary answer (a payment
// authorisation) comes well within it, and it is at or under the idle timeouts of the load
// balancers usually in front (Google's 30 s, AWS ALB's 60 s, Cloudflare's 100 s), so a visitor
// gets the gate's 504 rather than the balancer's page or nothing.
const DefaultOriginTimeout = 30 * time.Second

// DefaultBodyTimeout is Config.BodyTimeout's default: the API's (httpapi.DefaultBodyTimeout).
const DefaultBodyTimeout = 10 * time.Second

// storeTimeout bounds each call of the gate to the line store.
const storeTimeout = 3 * time.Second

// Config configures a Gateway.
type Config struct {
	File File // required: the gate file, as Parse returned it
	// Line is the line's one implementation of its rules (joins, reads, the limits, the
	// problems, the history's counts). Required.
	Line       *line.Service
	Admissions *token.Admissions // required
	// Clients finds who a request comes from (package clientaddr: the one rule of every
	// listener), for the limits per client, the bypass by address, the X-Forwarded-For sent
	// to the origin and whether X-Forwarded-Proto is believed. Nil: the connection's peer, no
	// proxy trusted.
	Clients *clientaddr.Resolver
	// Origins decides which browsers' requests may take a place in line (origin.Policy.MayJoin:
	// the rule of the API's joins, with Fetch Metadata for requests without an Origin). Nil:
	// the same-origin default.
	Origins *origin.Policy
	// Waitroom serves the service's own paths (waitroomPaths) on the gate's listener: the API
	// handler. Required when File.Listen is set.
	Waitroom http.Handler
	// RefreshEvery is how often, at most, an admitted visitor's requests count as activity in
	// the store (one Status call per ticket and instance). Defaults to 5 s; an event whose
	// session_ttl_s is under three times that is refreshed every third of it.
	RefreshEvery time.Duration
	// Transport carries proxied requests. Defaults to a clone of http.DefaultTransport keeping
	// up to 512 idle connections per origin. An *http.Transport without a
	// ResponseHeaderTimeout is cloned with the gate file's (File.OriginTimeout); another
	// RoundTripper bounds its own waits.
	Transport http.RoundTripper
	// Signals, when set, counts the latency (to the origin's response headers) and the
	// failures (5xx, no answer) of every admitted visitor's request passed to the origin, per
	// event, session (the ticket number) and client (each one's share is bounded, originhealth):
	// admission mode auto's measurements (package autoadmit).
	Signals *autoadmit.Signals
	// Observe, when set, is told of every request the gate's listener answers itself or passes
	// to an origin (not those under the waiting room's own paths, which Waitroom counts): route
	// is RouteOrigin, RouteWaiting or RouteRefused, method one of the common methods or
	// "other", code the answer's status (101 for a switched connection), took the time to the
	// end of the answer. The metrics' waitroom_http_request_duration_seconds.
	Observe func(route, method string, code int, took time.Duration)
	// BodyTimeout bounds the arrival of a request's body on the gate's listener for the
	// answers the gate makes itself (net/http reads an unread body before it answers), as the
	// API bounds its own (httpapi.Config.BodyTimeout). A body passed on to an origin must keep
	// moving instead: no progress for origin_timeout_s ends the request (408 body_timeout when
	// the client stopped sending). Defaults to DefaultBodyTimeout.
	BodyTimeout time.Duration
	Now         func() time.Time // defaults to time.Now; token freshness only
	Logger      *slog.Logger     // defaults to slog.Default()
}

// Gateway is the gate: an http.Handler proxying to the origins of the gate file, and the
// forward-auth check (Check).
type Gateway struct {
	cfg     Config
	tickets *token.TicketIDs
	routes  *routes
	proxies map[*url.URL]*httputil.ReverseProxy
	public  *http.ServeMux // PublicRoutes, to Config.Waitroom
	cache   cache
	flight  singleflight.Group // Status calls by ticket id
}

// New checks cfg and builds the gateway. Errors: a missing required field.
func New(cfg Config) (*Gateway, error) {
	if cfg.Line == nil || cfg.Admissions == nil {
		return nil, errors.New("gateway: Line and Admissions are required")
	}
	if cfg.File.Listen != "" && cfg.Waitroom == nil {
		return nil, errors.New("gateway: Waitroom (the API handler) is required in gate mode")
	}
	if cfg.RefreshEvery <= 0 {
		cfg.RefreshEvery = 5 * time.Second
	}
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 0, 512
		cfg.Transport = t
	}
	if t, ok := cfg.Transport.(*http.Transport); ok && t.ResponseHeaderTimeout == 0 {
		t = t.Clone()
		t.ResponseHeaderTimeout = cfg.File.OriginTimeout()
		cfg.Transport = t
	}
	rt, err := compile(cfg.File)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, tickets: cfg.Line.Tickets(), routes: rt, proxies: map[*url.URL]*httputil.ReverseProxy{},
		public: http.NewServeMux()}
	if cfg.Waitroom != nil {
		for _, p := range PublicRoutes {
			g.public.Handle(p, cfg.Waitroom)
		}
	}
	g.cache.init(cfg.RefreshEvery)
	for _, s := range rt.sites {
		if s.origin != nil {
			g.proxies[s.origin] = g.newProxy(s.origin)
		}
		for _, p := range s.protect {
			if p.origin != nil && g.proxies[p.origin] == nil {
				g.proxies[p.origin] = g.newProxy(p.origin)
			}
		}
	}
	return g, nil
}

// visit is an admitted visitor's request on its way to the origin.
type visit struct {
	event    string
	ticketID string
	ref      queue.TicketRef
	number   int64
	until    time.Time
	headers  [4][]string // the X-Waitroom-* values, made once per token (shared, read-only)
}

func newVisit(ev, ticketID string, ref queue.TicketRef, number int64, until time.Time) *visit {
	v := &visit{event: ev, ticketID: ticketID, ref: ref, number: number, until: until}
	v.headers = [4][]string{{ev}, {ticketID}, {strconv.FormatInt(number, 10)}, {until.UTC().Format(httpjson.TimeLayout)}}
	return v
}

type ctxKey struct{}

// proxied is what the proxy's hooks need of the request (in its context).
type proxied struct {
	visit *visit       // nil: not protected
	chain []netip.Addr // the believed forwarding chain, client first (clientaddr.Resolver.Chain)
	https bool
	path  string       // the cleaned path to forward, when the request's is not it ("" otherwise)
	start time.Time    // when an admitted visitor's request was passed on (Config.Signals)
	body  *watchedBody // the request's body, watched (nil: none)
	// wrote, first and dial are set by the transport's goroutines (httptrace) and read once
	// the answer is in (latency): when the request's last byte was written to the origin and
	// when its answer's first byte was read (ns since start; 0 not yet), and how long the TCP
	// connect of a new connection took (ns).
	wrote, first, dial, connecting atomic.Int64
	// informational: the origin sent a 1xx (100 Continue, 103 Early Hints) before its answer,
	// so first is that 1xx's first byte, not the answer's (latency).
	informational atomic.Bool
}

// client is the visitor's client (clientaddr.Group of the chain's first address; the zero
// Prefix when none): what counts alike in auto admission's signals.
func (px *proxied) client() netip.Prefix {
	if len(px.chain) == 0 {
		return netip.Prefix{}
	}
	return clientaddr.Group(px.chain[0])
}

// trace is the transport's hooks that time what the origin itself takes of a request (latency).
func (px *proxied) trace() *httptrace.ClientTrace {
	since := func() int64 { return max(int64(time.Since(px.start)), 1) }
	return &httptrace.ClientTrace{
		ConnectStart: func(string, string) { px.connecting.Store(since()) },
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				px.dial.Store(since() - px.connecting.Load())
			}
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { px.wrote.Store(since()) },
		GotFirstResponseByte: func() { px.first.Store(since()) },
		Got1xxResponse: func(int, textproto.MIMEHeader) error {
			px.informational.Store(true)
			return nil
		},
	}
}

// latency is what the origin took of an answered request: from its last byte written to the
// answer's first byte read, plus the TCP connect of a new connection. Not the time since the
// gate passed the request on: that also holds the client's upload of its body and the gate's
// own goroutines' waits for a CPU (handing the request to the transport's writer, the answer
// to the handler), which a gate busy with the waiting crowd's polls makes longer than the
// origin's own time (docs/autoadmit.md, "A gate's own delay is not the origin's"). One such
// wait is left: the reader's, woken by the answer (autoadmit.Window.GateDelay). After a 1xx
// the transport reports no first byte of the answer itself (GotFirstResponseByte is the
// 1xx's): the answer is then timed to now, as its header has just been read (ModifyResponse),
// else an origin answering "100 Continue" or "103 Early Hints" at once and its answer 1.5 s
// later would read as a few ms (helper-77). That time holds the gate's wait for a CPU to run
// ModifyResponse too: such an origin may read a little slower on a busy gate, never faster.
func (px *proxied) latency() time.Duration {
	f := px.first.Load()
	if f == 0 {
		return time.Since(px.start)
	}
	if px.informational.Load() {
		f = max(int64(time.Since(px.start)), 1)
	}
	if w := px.wrote.Load(); w > 0 && w <= f {
		return time.Duration(f - w + px.dial.Load())
	}
	// An answer before the request's end (an early answer) is timed from the start, which
	// holds the connect already.
	return time.Duration(f)
}

// The routes of Config.Observe: a request passed to an origin (not protected, bypassed, or an
// admitted visitor's), answered as a visitor who waits (the page, or a 503 waiting_room), or
// refused by the gate itself (a path or host it refuses, no site, a limit, a closed event, the
// store unreachable).
const (
	RouteOrigin  = "gate:origin"
	RouteWaiting = "gate:waiting"
	RouteRefused = "gate:refused"
)

// ServeHTTP serves the waiting room's public routes, passes bypasses and unprotected paths to
// the origin, and sends protected requests through the line. A path the gate's path rule
// refuses is answered 400 invalid_path; the origin receives the cleaned path the gate matched.
// With Config.Observe set, every request but those under the waiting room's own paths is
// reported to it.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.cfg.Observe == nil {
		g.serve(w, r, nil)
		return
	}
	start := time.Now()
	ow := &observed{ResponseWriter: w}
	route := RouteRefused
	g.serve(ow, r, &route)
	if route == "" {
		return // the waiting room's own path: the API counted it
	}
	code := ow.code
	if code == 0 {
		code = http.StatusOK
	}
	g.cfg.Observe(route, methodLabel(r.Method), code, time.Since(start))
}

// methodLabel is a request method as a metric's label: the common methods, else "other" (a
// method is any token a client writes).
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// observed is a ResponseWriter that keeps the status written; Unwrap lets http's
// ResponseController (httputil's flushes and hijack) reach the connection's.
type observed struct {
	http.ResponseWriter
	code int
}

func (o *observed) WriteHeader(code int) {
	if o.code == 0 || (o.code >= 100 && o.code < 200) {
		o.code = code
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *observed) Write(b []byte) (int, error) {
	if o.code == 0 {
		o.code = http.StatusOK
	}
	return o.ResponseWriter.Write(b)
}

func (o *observed) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// Hijack is a switched connection's (a WebSocket passed to the origin): 101.
func (o *observed) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	o.code = http.StatusSwitchingProtocols
	return http.NewResponseController(o.ResponseWriter).Hijack()
}

// serve is ServeHTTP; it sets *route (when not nil) to the route of Config.Observe, "" for the
// waiting room's own paths (as the path rule reads them), which the API counts.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, route *string) {
	set := func(rt string) {
		if route != nil {
			*route = rt
		}
	}
	// The gate's own answers carry X-Request-Id as the API's do (httpjson.RequestID); an
	// origin's answer passed on carries what the origin sent.
	w.Header().Set("X-Request-Id", httpjson.RequestID(r))
	var rc *http.ResponseController
	if r.ContentLength != 0 {
		// A body that never comes must not hold the connection: the gate's own answers wait
		// for it (net/http reads it before answering) at most BodyTimeout.
		rc = http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
	}
	p, bad := pathrule.Read(r.URL.Path, r.URL.RawPath)
	if bad == "" {
		bad = pathrule.ReadQuery(r.URL.RawQuery)
	}
	if bad != "" {
		httpjson.WriteProblem(w, invalidPath(bad))
		return
	}
	if waitroomPath(p.Clean()) != "" {
		set("")
		g.serveWaitroom(w, r)
		return
	}
	chain := g.cfg.Clients.Chain(r)
	var client netip.Addr
	if len(chain) > 0 {
		client = chain[0]
	}
	host, ok := readHost(r.Host)
	if !ok {
		httpjson.WriteProblem(w, invalidHost(r.Host))
		return
	}
	m := g.routes.route(host, p, r.URL.RawQuery, client, r.Header)
	if m.ambiguous {
		httpjson.WriteProblem(w, invalidPath(ambiguousPath))
		return
	}
	if m.origin == nil {
		httpjson.WriteProblem(w, noSite(host))
		return
	}
	px := &proxied{chain: chain, https: g.isHTTPS(r)}
	if p.Clean() != r.URL.Path || r.URL.RawPath != "" {
		px.path = p.Clean()
	}
	if m.event != "" {
		// The listener is not asked by a forward-auth proxy: a client's X-Forwarded-Method
		// (takesPlace) says nothing here, and is not read (nor passed on: gateHeader).
		r.Header.Del("X-Forwarded-Method")
		d := g.decide(r.Context(), r, r.Host, m.event, client)
		if d.cookie != nil {
			http.SetCookie(w, g.cookie(m.event, d.cookie.value, px.https, d.cookie.clear))
		}
		switch {
		case d.err != nil:
			hold(r, g.writeError(w, r, m.event, d.err, true)) // the API holds the check's, not this listener's
			return
		case d.noPlace:
			set(RouteWaiting)
			page := pageURL(m.event, "", r.URL.RequestURI())
			if wantsHTML(r, r.Method) {
				// A browser's navigation (a form posted from another site): the page, where the
				// visitor can join with a click (a place of their own, with the page's join).
				w.Header().Set("Cache-Control", "no-store")
				http.Redirect(w, r, page, http.StatusSeeOther)
				return
			}
			httpjson.WriteProblem(w, noPlaceProblem(m.event, absolute(r, px.https, page), http.StatusServiceUnavailable))
			return
		case d.visit == nil:
			set(RouteWaiting)
			g.writeWait(w, r, m.event, d.ticket, px.https)
			return
		}
		px.visit = d.visit
		if g.cfg.Signals != nil {
			px.start = time.Now()
		}
	}
	ctx := context.WithValue(r.Context(), ctxKey{}, px)
	if px.visit != nil && g.cfg.Signals != nil {
		ctx = httptrace.WithClientTrace(ctx, px.trace())
	}
	if rc != nil && r.Body != nil && r.Body != http.NoBody {
		// The transport's ResponseHeaderTimeout starts once the body is sent: an origin that
		// does not read a large body would hang the visitor for good. The body must keep
		// moving: no progress for origin_timeout_s ends the request, with a 504 when the origin
		// stopped reading, a 408 when the client stopped sending (each read waits on the
		// client's connection at most that long: a read blocked there is not ended by the
		// request's context).
		var stop func()
		ctx, px.body, stop = watchBody(ctx, r.Body, g.cfg.File.OriginTimeout(), rc)
		r.Body = px.body
		defer stop()
	}
	r = r.WithContext(ctx)
	w.Header().Del("X-Request-Id")
	set(RouteOrigin)
	g.proxies[m.origin].ServeHTTP(w, r)
	if rc != nil {
		// What is left of the body is read before the answer goes (net/http): within
		// BodyTimeout from now, not from a read long past (an origin that stopped reading).
		_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
	}
}

// serveWaitroom serves a request under the waiting room's own paths: one of PublicRoutes,
// without the request's Authorization header, or a 404 (the admin API is not served on the
// gate's listener, whatever the method or key).
func (g *Gateway) serveWaitroom(w http.ResponseWriter, r *http.Request) {
	if p := httpjson.UncleanPath(r); p != nil { // as the API's listener answers it, never redirected
		httpjson.WriteProblem(w, p)
		return
	}
	h, pattern := g.public.Handler(r)
	if pattern == "" {
		httpjson.WriteProblem(w, httpjson.NewProblem(404, "not_found",
			"no such route on the gate's listener: it serves the waiting room's public routes only"))
		return
	}
	// The listener serves visitors, whose credentials are their cookie, their ticket id and
	// the join's body: the admin key is honoured on the API's listener only (an admin join
	// names a user and skips the limits and the challenge). An Authorization header is not
	// read here (a site's own Basic credentials, which browsers send to every path, neither).
	r.Header.Del("Authorization")
	switch pattern {
	case routeJoin, routeTicket:
		g.serveTicket(w, r, h, pattern == routeJoin)
	default:
		h.ServeHTTP(w, r)
	}
}

// The page's join and its reads of its ticket, among PublicRoutes.
const (
	routeJoin   = "POST /v1/events/{event_id}/tickets"
	routeTicket = "GET /v1/events/{event_id}/tickets/{ticket_id}"
)

// PagePlaces wraps next, the API's handler on the API's own listener, so that the page's join
// and its reads of its ticket there, for an event the gate file protects, give the visitor the
// gate's cookie of the event as they do on the gate's listener (serveTicket). Behind a
// forward-auth proxy the page's calls reach the API's listener (the proxy passes /v1/events/
// to it, docs/gate.md) and the check reads only that cookie: without it a visitor sent to the
// page from another site's form, who joined there, was a stranger on return to the protected
// path and was given a second place at the back of the line. A request with an Authorization
// header (an operator's join, which may name a user), and every other request, go to next as
// they came.
func (g *Gateway) PagePlaces(next http.Handler) http.Handler {
	page := http.NewServeMux()
	page.Handle(routeJoin, next)
	page.Handle(routeTicket, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodPost || r.Method == http.MethodGet) && g.routes.events[pathEvent(r.URL.Path)] {
			if _, auth := r.Header["Authorization"]; !auth {
				if _, pattern := page.Handler(r); pattern == routeJoin || pattern == routeTicket {
					g.serveTicket(w, r, next, pattern == routeJoin)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// pathEvent is the event id of a path under /v1/events/ ("" for any other path).
func pathEvent(p string) string {
	rest, ok := strings.CutPrefix(p, "/v1/events/")
	if !ok {
		return ""
	}
	ev, _, _ := strings.Cut(rest, "/")
	return ev
}

// serveTicket serves the page's join (join) or a read of its ticket on the gate's listener
// (and on the API's, PagePlaces), and gives the visitor the gate's cookie of the event for the
// ticket answered, so that the place taken on the page is the one the gate honours when the
// page sends its holder back to the protected path (room.js, ?return=): the gate's own cookie
// is the only place it reads, and a visitor sent to the page (another site's form posted to a
// protected path) who joined there was otherwise taken for a stranger on return, and put at
// the back of the line with a second place (helper-63). A join's ticket replaces the event's cookie (it is the place the
// visitor just took); so does a read's, unless the cookie holds a live admission the gate gave:
// the ticket the page reads is the place its holder kept (room.js keeps a place across a
// browser's restart, which ends the gate's session cookie, and asks before taking the one a
// link names), and a place the gate took meanwhile would send them back to the page for good
// (helper-64). The cookie holds the ticket id, as for a place the gate took: the gate reads the
// ticket (as its holder's poll) and admits it by its own token. The answer is held until the
// handler returns (a ticket's JSON: under a kilobyte).
func (g *Gateway) serveTicket(w http.ResponseWriter, r *http.Request, h http.Handler, join bool) {
	ev := pathEvent(r.URL.Path)
	c := &heldAnswer{ResponseWriter: w}
	h.ServeHTTP(c, r)
	if (c.code == http.StatusOK || c.code == http.StatusCreated) && (join || origin.FromSite(r.Header)) {
		id, evID, ok := ticketOfAnswer(c.body)
		var held string // the visitor's cookie of ev, read once
		if hc, err := r.Cookie(CookieName(ev)); err == nil {
			held = hc.Value
		}
		if ok && evID == ev && held != id && (join || !g.liveAdmission(held, ev)) {
			if _, err := g.tickets.Decode(ev, id); err == nil {
				http.SetCookie(w, g.cookie(ev, id, g.isHTTPS(r), false))
			}
		}
	}
	if c.code == 0 {
		c.code = http.StatusOK
	}
	w.WriteHeader(c.code)
	_, _ = w.Write(c.body)
}

// ticketOfAnswer reads the ticket id and event id of a ticket's JSON answer: from the prefix
// the API writes (`{"ticket_id":"…","event_id":"…"`, httpapi's writeTicketBooking; neither
// holds a character JSON escapes) without decoding the rest, else by decoding it.
func ticketOfAnswer(b []byte) (ticketID, eventID string, ok bool) {
	const p1, p2 = `{"ticket_id":"`, `","event_id":"`
	if rest, found := bytes.CutPrefix(b, []byte(p1)); found {
		if id, rest, found := bytes.Cut(rest, []byte(p2)); found && bytes.IndexByte(id, '"') < 0 && bytes.IndexByte(id, '\\') < 0 {
			if ev, _, found := bytes.Cut(rest, []byte(`"`)); found && bytes.IndexByte(ev, '\\') < 0 {
				return string(id), string(ev), true
			}
		}
	}
	var t struct {
		TicketID string `json:"ticket_id"`
		EventID  string `json:"event_id"`
	}
	if json.Unmarshal(b, &t) != nil {
		return "", "", false
	}
	return t.TicketID, t.EventID, true
}

// liveAdmission reports whether cookie, the value of the gate's cookie of event ev, is an
// admission token of ev that verifies and has not expired: an admission the gate gave, which a
// read of another ticket does not replace.
func (g *Gateway) liveAdmission(cookie, ev string) bool {
	if !strings.Contains(cookie, ".") {
		return false
	}
	claims, err := g.cfg.Admissions.Verify(cookie, g.cfg.Now())
	return err == nil && claims.Event == ev
}

// heldAnswer holds a handler's status and body until the handler returns (its headers go to
// the ResponseWriter it wraps, unwritten meanwhile).
type heldAnswer struct {
	http.ResponseWriter
	code int
	body []byte
}

func (a *heldAnswer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *heldAnswer) Write(b []byte) (int, error) {
	if a.code == 0 {
		a.code = http.StatusOK
	}
	a.body = append(a.body, b...)
	return len(b), nil
}

// Unwrap lets http.ResponseController reach the connection (the API sets a body's read
// deadline through it on a connection that is not connlimit's).
func (a *heldAnswer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

func (g *Gateway) isHTTPS(r *http.Request) bool { return g.cfg.Clients.HTTPS(r) }

func (g *Gateway) newProxy(origin *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			px, _ := pr.In.Context().Value(ctxKey{}).(*proxied)
			if px != nil && px.path != "" {
				pr.Out.URL.Path, pr.Out.URL.RawPath = px.path, escapePath(px.path)
			}
			pr.SetURL(origin)
			h := pr.Out.Header
			for k := range h {
				if g.routes.gateHeader(k) {
					delete(h, k)
				}
			}
			if up := h.Get("Upgrade"); up != "" && !strings.EqualFold(strings.TrimSpace(up), "websocket") {
				// Only a WebSocket is switched to (httputil copies the request's Upgrade): an
				// origin that switched to h2c, or another protocol that carries requests, would
				// give the visitor a connection on which its next requests, for any path, are
				// never seen by the gate. The request goes as a plain one.
				h.Del("Upgrade")
				h.Del("Connection")
			}
			h.Del("HTTP2-Settings")
			h.Set("X-Forwarded-Host", pr.In.Host)
			proto := "http"
			if px != nil && px.https {
				proto = "https"
			}
			h.Set("X-Forwarded-Proto", proto)
			if px != nil && len(px.chain) > 0 {
				h.Set("X-Forwarded-For", joinAddrs(px.chain))
			}
			if px != nil && px.visit != nil {
				setVisitHeaders(h, px.visit)
			}
		},
		Transport: g.cfg.Transport,
		// FlushInterval 0: httputil flushes at once anyway for text/event-stream and for bodies
		// of unknown length (streams), and a sized body goes out in one write.
		FlushInterval: 0,
		BufferPool:    bufferPool{},
		ModifyResponse: func(resp *http.Response) error {
			cmd := resp.Header.Get(HeaderCommand)
			resp.Header.Del(HeaderCommand)
			px, _ := resp.Request.Context().Value(ctxKey{}).(*proxied)
			if px != nil && px.visit != nil && g.cfg.Signals != nil {
				g.cfg.Signals.Observe(px.visit.event, px.visit.number, px.client(), px.latency(), resp.StatusCode >= 500)
			}
			if px == nil || px.visit == nil || !strings.EqualFold(strings.TrimSpace(cmd), "complete") {
				return nil
			}
			g.complete(resp.Request.Context(), px.visit)
			resp.Header.Add("Set-Cookie", g.cookie(px.visit.event, "", px.https, true).String())
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("X-Request-Id", httpjson.RequestID(r)) // an answer of the gate's own
			if px, _ := r.Context().Value(ctxKey{}).(*proxied); px != nil && px.body != nil && px.body.clientStalled.Load() {
				// The rest of the body is not waited for (net/http would, for up to BodyTimeout,
				// to keep the connection): the answer goes now, and the connection ends.
				w.Header().Set("Connection", "close")
				httpjson.WriteProblem(w, httpjson.NewProblem(408, "body_timeout",
					"the request's body stopped arriving: no part of it came for origin_timeout_s"))
				return
			} else if px != nil && px.body != nil && px.body.clientBroken.Load() {
				// Neither the origin's failure nor a measure of its health (auto admission).
				w.Header().Set("Connection", "close")
				httpjson.WriteProblem(w, httpjson.BrokenBody())
				return
			}
			stalled := errors.Is(context.Cause(r.Context()), errBodyStalled)
			if r.Context().Err() != nil && !stalled {
				return // the client went away
			}
			if px, _ := r.Context().Value(ctxKey{}).(*proxied); px != nil && px.visit != nil && g.cfg.Signals != nil {
				g.cfg.Signals.Observe(px.visit.event, px.visit.number, px.client(), time.Since(px.start), true)
			}
			if stalled || awaitingHeaders(err) {
				g.cfg.Logger.Warn("gate: origin timeout", "host", r.Host, "path", r.URL.Path, "err", err)
				httpjson.WriteProblem(w, httpjson.NewProblem(504, "origin_timeout", "the site behind the waiting room did not answer in time; retry shortly"))
				return
			}
			g.cfg.Logger.Warn("gate: origin unavailable", "host", r.Host, "path", r.URL.Path, "err", err)
			httpjson.WriteProblem(w, httpjson.NewProblem(502, "origin_unavailable", "the site behind the waiting room did not answer; retry shortly"))
		},
		ErrorLog: slog.NewLogLogger(g.cfg.Logger.Handler(), slog.LevelWarn),
	}
}

// awaitingHeaders reports whether a proxied request failed because the origin's response
// headers did not come in time (the transport's ResponseHeaderTimeout, or a TLS handshake that
// timed out), not because it could not be reached.
func awaitingHeaders(err error) bool {
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// setVisitHeaders sets the X-Waitroom-* headers of an admitted visit (the names are canonical).
func setVisitHeaders(h http.Header, v *visit) {
	h[HeaderEvent], h[HeaderTicket], h[HeaderNumber], h[HeaderAdmittedUntil] = v.headers[0], v.headers[1], v.headers[2], v.headers[3]
}

// joinAddrs writes a forwarding chain as X-Forwarded-For ("a, b, c").
func joinAddrs(chain []netip.Addr) string {
	b := make([]byte, 0, 16*len(chain))
	for i, a := range chain {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = a.AppendTo(b)
	}
	return string(b)
}

// complete ends the visit's admitted session (the origin's "Waitroom-Command: complete"):
// line.Service.Complete (Leave when the ticket holds no admission any more). The call does not
// run on the client's context.
func (g *Gateway) complete(ctx context.Context, v *visit) {
	g.cache.end(v.ticketID, g.cfg.Now())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	err := g.cfg.Line.Complete(ctx, v.ref)
	if err != nil && !errors.Is(err, queue.ErrTicketNotFound) {
		g.cfg.Logger.Warn("gate: could not end the session the origin completed", "event", v.event, "err", err)
	}
}

// cookieValue is a cookie the decision sets (clear: delete it).
type cookieValue struct {
	value string
	clear bool
}

// decision is what the gate does with a protected request: let it through (visit), make it
// wait (ticket), or fail (err).
type decision struct {
	visit  *visit
	ticket queue.Ticket
	cookie *cookieValue
	err    error
	// noPlace: a request without a live ticket that takes no place (takesPlace).
	noPlace bool
}

// CookieName is the name of the gate's cookie of an event.
func CookieName(eventID string) string { return "waitroom_" + eventID }

func (g *Gateway) cookie(eventID, value string, secure, clear bool) *http.Cookie {
	c := &http.Cookie{Name: CookieName(eventID), Value: value, Path: "/", HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteLaxMode}
	if clear {
		c.Value, c.MaxAge = "", -1
	}
	return c
}

// decide reads the request's cookie of the event and decides: an admission token still fresh
// passes with no store call; a stale one, or a place in line, is read (Status, which counts as
// activity); without either, or when the session or place ended, the visitor joins the line
// when the request may take a place (takesPlace; host is the Host the visitor wrote).
func (g *Gateway) decide(ctx context.Context, r *http.Request, host, ev string, client netip.Addr) decision {
	d := g.fromCookie(ctx, r, host, ev, client)
	if d.visit == nil {
		return d
	}
	// The admission is its holder's: used from more addresses at once than the event allows
	// (a cookie copied to many machines), this visitor is one too many, and takes its own place.
	switch err := g.cfg.Line.Bind(ctx, d.visit.ref, client); {
	case err == nil:
		return d
	case !errors.Is(err, line.ErrAdmissionShared):
		// The store did not count this address: not let through uncounted (a 503 with
		// Retry-After; the cookie is kept).
		return decision{err: err}
	}
	if !g.takesPlace(r, host) {
		return decision{noPlace: true}
	}
	t, err := g.join(ctx, ev, client)
	if err != nil {
		return decision{err: err, cookie: &cookieValue{clear: true}}
	}
	return g.fromTicket(ev, t, g.cfg.Now())
}

// fromCookie is decide before the admission's addresses are counted.
func (g *Gateway) fromCookie(ctx context.Context, r *http.Request, host, ev string, client netip.Addr) decision {
	now := g.cfg.Now()
	var ref queue.TicketRef
	var ticketID string
	// waiting: the cookie holds a ticket, not an admission: the visitor's page asks where it
	// stands, a poll as the API's (line.Service.Poll: counted against polls_per_ticket, and
	// answered from the instance's view of the line, without a store call, far from the
	// front); an admission's refresh is the gate's own read (Status).
	waiting := false
	if c, err := r.Cookie(CookieName(ev)); err == nil && c.Value != "" {
		if strings.Contains(c.Value, ".") { // an admission token
			if v, ok := g.cache.fresh(c.Value, now); ok && v.event == ev {
				return decision{visit: v}
			}
			claims, err := g.cfg.Admissions.Verify(c.Value, now)
			switch {
			case err == nil && claims.Event == ev:
				if rf, err := g.tickets.Decode(ev, claims.TicketID); err == nil {
					ref, ticketID = rf, claims.TicketID
					v := newVisit(ev, claims.TicketID, rf, claims.Number, claims.Expires)
					if g.cache.admitFresh(c.Value, v, claims.IssuedAt.Add(g.refreshEvery(ev)), now) {
						return decision{visit: v}
					}
				}
			case errors.Is(err, token.ErrTokenExpired):
				if id, ok := unverifiedSubject(c.Value, ev); ok {
					if rf, err := g.tickets.Decode(ev, id); err == nil {
						ref, ticketID = rf, id
					}
				}
			}
		} else if rf, err := g.tickets.Decode(ev, c.Value); err == nil {
			ref, ticketID, waiting = rf, c.Value, true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if ticketID != "" {
		if v, tok, ok := g.cache.recent(ticketID, now, g.refreshEvery(ev)); ok {
			return decision{visit: v, cookie: &cookieValue{value: tok}}
		}
		if !g.cache.ended(ticketID, now) {
			// One Status call per ticket at a time: a page's concurrent requests share it.
			res, _, _ := g.flight.Do(ev+"/"+ticketID, func() (any, error) {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
				defer cancel()
				read := g.cfg.Line.Status
				if waiting {
					read = g.cfg.Line.Poll
				}
				t, err := read(sctx, ref)
				switch {
				case err == nil && (t.Status == queue.StatusAdmitted || t.Status == queue.StatusQueued):
					d := g.fromTicket(ev, t, now)
					return &d, nil
				case err == nil || errors.Is(err, queue.ErrTicketNotFound):
					return (*decision)(nil), nil // the session or the place ended: back to the line
				default:
					return &decision{err: err}, nil
				}
			})
			if d := res.(*decision); d != nil {
				return *d
			}
		}
	}
	if !g.takesPlace(r, host) {
		return decision{noPlace: true}
	}
	t, err := g.join(ctx, ev, client)
	if err != nil {
		if ticketID != "" {
			return decision{err: err, cookie: &cookieValue{clear: true}}
		}
		return decision{err: err}
	}
	return g.fromTicket(ev, t, now)
}

// refreshEvery is how often an admitted visitor of ev counts as active: RefreshEvery, or a
// third of the event's session TTL when that is shorter, so that a visitor who keeps making
// requests never outlives its session between two refreshes.
func (g *Gateway) refreshEvery(ev string) time.Duration {
	d := g.cfg.RefreshEvery
	if e := g.cfg.Line.Cached(ev); e.SessionTTL > 0 && e.SessionTTL/3 < d {
		d = e.SessionTTL / 3
	}
	return d
}

// fromTicket is the decision for a ticket the store returned, admitted or queued.
func (g *Gateway) fromTicket(ev string, t queue.Ticket, now time.Time) decision {
	id := g.tickets.Encode(t.TicketRef)
	if t.Status != queue.StatusAdmitted {
		return decision{ticket: t, cookie: &cookieValue{value: id}}
	}
	tok, err := g.cfg.Admissions.Mint(ev, id, t.Number, t.AdmittedUntil, t.Now)
	if err != nil {
		return decision{err: err}
	}
	v := newVisit(ev, id, t.TicketRef, t.Number, t.AdmittedUntil)
	g.cache.refreshed(id, tok, v, now)
	return decision{visit: v, cookie: &cookieValue{value: tok}}
}

// takesPlace reports whether a request without a live ticket, sent to host, joins the line
// for its visitor:
//
//   - every method but OPTIONS (the original method: X-Forwarded-Method when the forward-auth
//     check is asked with one, else the request's own). A CORS preflight is an OPTIONS request
//     that browsers send without cookies (Fetch, "CORS-preflight fetch"), so each one would
//     take a new place, and with a free slot an admission, that nobody holds; OPTIONS is never
//     a page a person waits for;
//   - and only a request that origin.Policy.MayJoin lets join (Config.Origins): not another
//     site's form POST, nor an image, script or frame of another site's page, which browsers
//     send without the visitor's cookie (SameSite=Lax), so each one would take a new place
//     from the visitor's own address.
//
// Such a request is answered as a visitor who waits, without a place (noPlaceProblem): the
// origin sees it only with an admission, as any request. A client that says OPTIONS or
// cross-site falsely only denies itself a place.
func (g *Gateway) takesPlace(r *http.Request, host string) bool {
	m := r.Method
	if v, ok := httpjson.OnlyValue(r.Header, "X-Forwarded-Method"); ok && v != "" {
		m = v
	} else if !ok {
		return false // two methods named: no place for an ambiguous request
	}
	return !strings.EqualFold(m, http.MethodOptions) && g.cfg.Origins.MayJoin(r.Header, host)
}

// noPlaceProblem is the answer to a request that takes no place (takesPlace): the waiting
// room's problem (code waiting_room, status as the caller answers a waiting visitor), with the
// event and its page but no ticket.
func noPlaceProblem(ev, page string, status int) *httpjson.Problem {
	p := httpjson.NewProblem(status, "waiting_room", "event "+ev+" admits through its waiting room; this request takes no place in line "+
		"(a CORS preflight, or a request that another site's page made without being a navigation to this one) and is passed on only with an admission")
	p.Extra = map[string]any{"event_id": ev, "waiting_room_url": page}
	return p
}

// join takes a place in ev's line for a visitor without a live ticket: an anonymous join of
// the client, through the line's one implementation of its rules (line.Service.Join), so the
// event's joins_per_client, identity_required and challenge hold here as at the API. A
// visitor of an event that needs an identity or a challenge is refused (the gate can give
// neither: such an event is joined through its page or the API).
func (g *Gateway) join(ctx context.Context, ev string, client netip.Addr) (queue.Ticket, error) {
	return g.cfg.Line.Join(ctx, line.JoinRequest{Event: ev, Client: client})
}

// unverifiedSubject reads the "sub" of an expired admission token of event ev. The ticket id
// it names is authenticated on its own (TicketIDs.Decode) and its state read from the store,
// so nothing is trusted from the expired token itself.
func unverifiedSubject(tok, ev string) (string, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var c struct {
		Sub string `json:"sub"`
		Evt string `json:"evt"`
	}
	if json.Unmarshal(raw, &c) != nil || c.Evt != ev || c.Sub == "" {
		return "", false
	}
	return c.Sub, true
}

// wantsHTML reports whether the request is a browser's navigation (Accept names text/html).
func wantsHTML(r *http.Request, method string) bool {
	return (method == http.MethodGet || method == http.MethodHead || method == http.MethodPost) &&
		strings.Contains(r.Header.Get("Accept"), "text/html")
}

// ReturnPath returns u when it is a path on this site ("/…", not "//…" nor "/\…"), else "/".
// The waiting page goes back to it on admission.
func ReturnPath(u string) string {
	if !strings.HasPrefix(u, "/") || strings.HasPrefix(u, "//") || strings.HasPrefix(u, "/\\") ||
		strings.ContainsAny(u, "\r\n\t") {
		return "/"
	}
	return u
}

// pageURL is the waiting-room page of a ticket, coming back to ret after admission.
func pageURL(ev, ticketID, ret string) string {
	q := url.Values{}
	if ticketID != "" {
		q.Set("ticket", ticketID)
	}
	q.Set("return", ReturnPath(ret))
	return "/e/" + ev + "?" + q.Encode()
}

func absolute(r *http.Request, https bool, p string) string {
	scheme := "http://"
	if https {
		scheme = "https://"
	}
	return scheme + r.Host + p
}

// writeWait answers a visitor who waits: the page (a redirect) or a 503 problem.
func (g *Gateway) writeWait(w http.ResponseWriter, r *http.Request, ev string, t queue.Ticket, https bool) {
	page := pageURL(ev, g.tickets.Encode(t.TicketRef), r.URL.RequestURI())
	w.Header().Set("Cache-Control", "no-store")
	if wantsHTML(r, r.Method) {
		code := http.StatusFound
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			code = http.StatusSeeOther
		}
		http.Redirect(w, r, page, code)
		return
	}
	httpjson.WriteProblem(w, g.waitProblem(ev, t, absolute(r, https, page), http.StatusServiceUnavailable))
}

// waitProblem is the problem of a waiting visitor, with its Retry-After (poll_after_s: the
// header and the body's retry_after_s).
func (g *Gateway) waitProblem(ev string, t queue.Ticket, page string, status int) *httpjson.Problem {
	e := g.cfg.Line.Cached(ev)
	eta := e.TicketETA(t)
	retry := e.PollAfter(t, eta)
	p := httpjson.NewProblem(status, "waiting_room", fmt.Sprintf("you are in line for %s, %d ahead of you; wait on the page, or retry after %d s", ev, max(t.Position-1, 0), retry))
	var etaV any
	if eta >= 0 {
		etaV = eta
	}
	p.Extra = map[string]any{"event_id": ev, "ticket_id": g.tickets.Encode(t.TicketRef), "number": t.Number,
		"position": t.Position, "waiting": t.Waiting, "eta_s": etaV, "waiting_room_url": page}
	// Set as the problem's, not as a header of the caller's: WriteProblem answers a 503
	// without one "Retry-After: 1", which told every waiting API client to poll each second,
	// wherever it stood in line.
	p.RetryAfter = time.Duration(retry) * time.Second
	return p
}

// writeError answers a protected request the line could not take with the line's problem
// (line.Service.Problem: closed or sold-out events 410, limits 429, an identity or challenge
// the gate cannot give 401, a store that does not answer 503; with page, a 410 sends a
// browser to the page instead), and counts it in the event's history.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, ev string, err error, page bool) *httpjson.Problem {
	w.Header().Set("Cache-Control", "no-store")
	var p *httpjson.Problem
	if errors.Is(err, queue.ErrEventNotFound) || errors.Is(err, registry.ErrNotFound) {
		// Not the visitor's mistake: the operator's gate file names an event that is not there.
		g.cfg.Logger.Error("gate: the gate file protects paths with an event that does not exist", "event", ev)
		p = httpjson.NewProblem(503, "waiting_room_not_set_up", "the waiting room of this page is not set up (event "+ev+" does not exist)")
	} else {
		p = g.cfg.Line.Problem(err, ev)
	}
	g.cfg.Line.Answered(ev, p.Status)
	if page && p.Status == 410 && wantsHTML(r, r.Method) {
		http.Redirect(w, r, pageURL(ev, "", r.URL.RequestURI()), http.StatusFound)
		return nil
	}
	if p.Status == 503 && p.RetryAfter == 0 {
		w.Header().Set("Retry-After", "2")
	}
	if !page {
		// The check's answer: nginx's auth_request turns it into its own 500 and keeps only
		// headers, so the code goes in one (the shipped configuration answers the problem).
		w.Header().Set(HeaderProblem, p.Code)
	}
	httpjson.WriteProblem(w, p)
	return p
}

// hold holds a refusal a client can repeat at full speed (a 429, a Held problem) for
// line.RefusalHold before it is sent, as the API does (ended early when the client goes): on
// the gate's own listener, which the API's handler does not wrap.
func hold(r *http.Request, p *httpjson.Problem) {
	if p == nil || (p.Status != http.StatusTooManyRequests && !p.Held) {
		return
	}
	t := time.NewTimer(line.RefusalHold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

func secretEqual(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Ended tells the gate that the ticket ref left the line or ended its session through this
// instance (line.Config.OnEnd: a leave or a completion through the API): its admission token,
// verified earlier and still fresh, no longer passes here without a store call. Another
// instance learns it at its next refresh (at most RefreshEvery).
func (g *Gateway) Ended(ref queue.TicketRef) {
	g.cache.end(g.tickets.Encode(ref), g.cfg.Now())
}

// cache keeps what lets an admitted visitor's requests pass without a store call: admission
// tokens verified and still fresh (issued less than RefreshEvery ago), each ticket's last
// refresh (so that a ticket's concurrent requests refresh once), and tickets whose session the
// origin ended here. It is swept every RefreshEvery, so it holds about one entry per visitor
// active in the last two periods.
type cache struct {
	mu      sync.Mutex
	every   time.Duration
	tokens  map[string]freshToken
	tickets map[string]ticketState
	swept   time.Time
}

type freshToken struct {
	v     *visit
	until time.Time
}

type ticketState struct {
	at    time.Time // last refresh, or the end
	token string
	v     *visit
	ended bool
}

func (c *cache) init(every time.Duration) {
	c.every = every
	c.tokens = map[string]freshToken{}
	c.tickets = map[string]ticketState{}
}

// fresh returns the visit of a token verified earlier and still fresh.
func (c *cache) fresh(tok string, now time.Time) (*visit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.tokens[tok]
	if !ok || !now.Before(f.until) || !now.Before(f.v.until) {
		return nil, false
	}
	if s, ok := c.tickets[f.v.ticketID]; ok && s.ended {
		return nil, false
	}
	return f.v, true
}

// admitFresh records a verified token, fresh until `until`, and reports whether it is fresh
// now (and its ticket not ended here).
func (c *cache) admitFresh(tok string, v *visit, until, now time.Time) bool {
	if !now.Before(until) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.tickets[v.ticketID]; ok && s.ended {
		return false
	}
	c.sweep(now)
	c.tokens[tok] = freshToken{v: v, until: until}
	return true
}

// recent returns the token of a refresh of the ticket made less than every ago.
func (c *cache) recent(ticketID string, now time.Time, every time.Duration) (*visit, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.tickets[ticketID]
	if !ok || s.ended || now.Sub(s.at) >= every || !now.Before(s.v.until) {
		return nil, "", false
	}
	return s.v, s.token, true
}

func (c *cache) refreshed(ticketID, tok string, v *visit, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(now)
	c.tickets[ticketID] = ticketState{at: now, token: tok, v: v}
}

func (c *cache) end(ticketID string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(now)
	c.tickets[ticketID] = ticketState{at: now, ended: true}
}

// ended reports whether the origin ended the ticket's session here, recently.
func (c *cache) ended(ticketID string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.tickets[ticketID]
	return ok && s.ended && now.Sub(s.at) < 2*c.every
}

// sweep drops what is no longer fresh, once per period. Called with mu held.
func (c *cache) sweep(now time.Time) {
	if now.Sub(c.swept) < c.every {
		return
	}
	c.swept = now
	for k, f := range c.tokens {
		if !now.Before(f.until) {
			delete(c.tokens, k)
		}
	}
	for k, s := range c.tickets {
		if now.Sub(s.at) >= 2*c.every {
			delete(c.tickets, k)
		}
	}
}

// bufferPool lends the proxy its copy buffers (32 KiB, as httputil's own), instead of one new
// buffer per request.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

func (bufferPool) Get() []byte  { return *(copyBuffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

// errBodyStalled is the cause of a proxied request whose body the origin stopped reading.
var errBodyStalled = errors.New("gateway: the origin stopped reading the request's body")

// watchBody returns body wrapped so that a read ends the request (ctx's cause errBodyStalled)
// when none has made progress for timeout: the origin takes the body as the transport sends it,
// so a body that stops moving is an origin that stopped reading (or a client that stopped
// sending). It stops watching once the body is read to its end (the transport's
// ResponseHeaderTimeout then bounds the wait), or when stop is called.
//
// rc (nil: none) is the client's connection: each read of it may wait at most timeout (its read
// deadline), and a read that timed out marks the body clientStalled.
func watchBody(ctx context.Context, body io.ReadCloser, timeout time.Duration, rc *http.ResponseController) (context.Context, *watchedBody, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	wb := &watchedBody{ReadCloser: body, rc: rc}
	wb.timer = time.AfterFunc(timeout, func() { cancel(errBodyStalled) })
	wb.timeout = timeout
	return ctx, wb, func() { wb.timer.Stop(); cancel(nil) }
}

type watchedBody struct {
	io.ReadCloser
	timer         *time.Timer
	timeout       time.Duration
	rc            *http.ResponseController
	clientStalled atomic.Bool // a read of the client's connection timed out
	clientBroken  atomic.Bool // the client's body came cut short or not validly framed
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err != nil: // the end, or the client's failure: the transport takes it from here
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			b.clientStalled.Store(true)
		} else if err != io.EOF && !errors.Is(err, http.ErrBodyReadAfterClose) && !errors.Is(err, net.ErrClosed) {
			// net/http's reading of the body failed (a chunk's size that is not hex, a body
			// shorter than its Content-Length): the client's mistake, not the origin's. (A body
			// the transport closed, its origin having failed, is not the client's.)
			b.clientBroken.Store(true)
		}
		b.timer.Stop()
	case n > 0:
		b.timer.Reset(b.timeout)
	}
	return n, err
}

// noSite is the 404 of a request for a host (as readHost read it) that no site of the gate file
// serves, at the gate's listener and at the forward-auth check alike.
func noSite(host string) *httpjson.Problem {
	return httpjson.NewProblem(404, "not_found", "the gate has no site for host "+host)
}

// escapePath is the path p (decoded) as the gate sends it to the origin: every byte that RFC
// 3986's pchar allows as it is (unreserved, sub-delims "!$&'()*+,;=", ":" and "@", and "/"),
// any other percent-encoded. Go's own escaping (url.URL.EscapedPath without a RawPath) also
// encodes "!", "'", "(", ")" and "*", so an origin matching raw paths, or checking a signed or
// cached URL, got "/item%281%29" for the visitor's "/item(1)".
func escapePath(p string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(p); i++ {
		if !pchar[p[i]] {
			n++
		}
	}
	if n == 0 {
		return p
	}
	b := make([]byte, 0, len(p)+2*n)
	for i := 0; i < len(p); i++ {
		if c := p[i]; pchar[c] {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

// pchar holds the bytes a path carries unescaped (RFC 3986 section 3.3: pchar, and "/").
var pchar = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=:@/", byte(c)) >= 0
	}
	return t
}()
