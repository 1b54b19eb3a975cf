// Package httpapi is the HTTP interface of a waitroom instance: events, tickets, admissions,
// the JWKS, health and metrics. Every client error is an RFC 9457 problem with a stable code;
// handlers never let a client's input cause a 5xx or a panic.
package httpapi

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/adminkey"
	"github.com/waitroom/waitroom/internal/apidoc"
	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/buildinfo"
	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/metrics"
	"github.com/waitroom/waitroom/internal/origin"
	"github.com/waitroom/waitroom/internal/ratelimit"
	"github.com/waitroom/waitroom/internal/recorder"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

// Config configures the API.
type Config struct {
	Registry *registry.Registry // required
	// Signals, AutoStore and AutoHistory serve admission mode auto: an origin's health report
	// (POST /v1/events/{event_id}/health) is counted in Signals, and the controller's state and
	// samples (GET /v1/events/{event_id}/auto) are read from AutoStore and AutoHistory. All
	// three or none (the routes are then not served).
	Signals     *autoadmit.Signals
	AutoStore   autoadmit.Store
	AutoHistory history.Store
	// Line is the line's one implementation of its rules (joins, polls, leaves, the limits,
	// identity and challenge checks, the restore of a lost line, the problems). Required.
	Line       *line.Service
	Admissions *token.Admissions // required
	// Keys checks admin keys, names them and gives their roles, and mints and revokes named
	// ones. Required.
	Keys *adminkey.Keys
	// AuditTrail keeps the admin actions (package sqlstore's DB). Required.
	AuditTrail AuditTrail
	// History serves the events' recent past and the instances alive (GET
	// /v1/events/{event_id}/history, GET /v1/instances) and counts the 429s and 503s answered
	// on events' routes. Nil: those routes are not served.
	History *recorder.Recorder
	Metrics *metrics.Metrics // required
	// Clients finds a request's client for the limits per client (package clientaddr). Nil:
	// the connection's peer address, no proxy trusted.
	Clients *clientaddr.Resolver
	// Origins are the web sites whose pages may make browsers join (package origin). Nil: the
	// same origin only.
	Origins *origin.Policy
	// Captcha is the verifier of external challenges, the line's (line.Config.Captcha): an
	// event's configuration may name a new siteverify_url only among the URLs it allows.
	// Nil: captcha.New's defaults (captcha.DefaultSiteverifyURLs).
	Captcha *captcha.Verifier
	// HealthURLs are the URLs an event's auto.health_url may newly name (serve --health-urls;
	// the controller polls only those). The zero value allows none.
	HealthURLs autoadmit.HealthURLs
	// AdminFailures is how many failed admin authentications one client may make per
	// AdminFailureWindow, counted in Counters (on all instances together); beyond it admin
	// calls answer 429 rate_limited until the window ends, whatever key they carry. Defaults
	// to DefaultAdminFailures.
	AdminFailures int64
	// AdminFailureWindow defaults to DefaultAdminFailureWindow.
	AdminFailureWindow time.Duration
	// Counters keep the counts of failed admin authentications shared by the instances (the
	// store's: store.Backend.Counters). Nil, or when they do not answer: this instance's own
	// count.
	Counters store.Counters
	// MetricsPublic serves GET /metrics to anyone. False (the default): /metrics needs the admin
	// key (the command line serves it without one on its own listener, --metrics-addr).
	MetricsPublic bool
	// BodyTimeout bounds the reading of a request's body (a slow sender is cut off: 408
	// body_timeout).
	// Defaults to DefaultBodyTimeout. Bodiless requests (push streams) get no read deadline.
	BodyTimeout time.Duration
	// Ready reports whether the store and database answer (for /readyz), less the checks of
	// skip.
	Ready func(ctx context.Context, skip ReadyChecks) error
	// AccessLogSample is the fraction of requests (0 to 1) the access log writes, besides every
	// 5xx, which it always writes: a flash crowd's every request is gigabytes (44.6 MB for
	// 3,000 people in 5 minutes). 0 writes the 5xx only.
	AccessLogSample float64
	// AccessLog, when set, gets one line per request (level Info): request id, method, route,
	// path, status, duration (ms) and client address.
	AccessLog *slog.Logger
	// RequestTimeout is the deadline of every request's context but those of HandleStream
	// routes: a store or database call still waiting then fails, and the request answers 503
	// store_unavailable. 0 = none. The deadline is kept to 10 ms (deadlineGrain: requests
	// that start within it share one), and such a context is not cancelled when the client
	// goes away.
	RequestTimeout time.Duration
	// RefusalHold is how long a 429 rate_limited answer, or a problem marked Held (403
	// challenge_failed), is held before it is sent (ended early when the client goes): a bot
	// refused at full speed gets one answer per connection per
	// RefusalHold instead of thousands a second, each of which costs the instance (and the
	// machine) CPU; a page told to retry after Retry-After (at least 1 s) waits that much more.
	// 0 = DefaultRefusalHold, negative = none.
	RefusalHold time.Duration
	Now         func() time.Time // defaults to time.Now
	Logger      *slog.Logger     // defaults to slog.Default()
}

// Defaults of Config.
const (
	// DefaultAdminFailures per DefaultAdminFailureWindow: a person mistyping the key a few times
	// is not slowed; guessing a 16-byte key at 10 a minute per address is hopeless.
	DefaultAdminFailures      = 10
	DefaultAdminFailureWindow = time.Minute
	// DefaultRefusalHold: line.RefusalHold, every door's.
	DefaultRefusalHold = line.RefusalHold
	// DefaultBodyTimeout: the largest body (an event with 50,000 seats, 1 MiB) takes well under
	// a second on any link fit for an admin; a join's body is a few hundred bytes.
	DefaultBodyTimeout = 10 * time.Second
)

// API serves the HTTP interface.
type API struct {
	cfg     Config
	mux     *http.ServeMux
	sale    SaleHooks
	streams map[string]bool // patterns served without RequestTimeout
	// adminFails counts failed admin authentications per client on this instance, when
	// Config.Counters do not answer; refusals remember the clients the shared count refused
	// until its window ends (see docs/api.md, "Limits").
	adminFails *ratelimit.Window
	refusals   *ratelimit.Refusals
	deadlines  *deadlines // of the requests bounded by RequestTimeout
}

// SaleHooks let the sale (package saleapi) add to the event and ticket views. Each may be nil.
type SaleHooks struct {
	// BookingOf returns the id of the booking a ticket made ("" when none), for COMPLETED
	// tickets.
	BookingOf func(ctx context.Context, event, ticketID string) string
	// Sold returns an event's units sold and whether it is sold out. Errors:
	// sale.ErrNotForSale (the view shows no counts); any other makes the event's
	// view answer 503 (the database did not answer).
	Sold func(ctx context.Context, event string) (sold int64, soldOut bool, err error)
	// Written applies an event's configuration, just written, to the sale's store before the
	// write is answered (capacity, seats, max_per_booking, hold_ttl_s). An error is logged:
	// the configuration is stored, and the sale's sync applies it within a second.
	Written func(ctx context.Context, e event.Event) error
}

// SetSaleHooks installs the sale's hooks. Call before serving.
func (a *API) SetSaleHooks(h SaleHooks) { a.sale = h }

// New returns the API handler.
func New(cfg Config) (*API, error) {
	if cfg.Registry == nil || cfg.Line == nil || cfg.Admissions == nil ||
		cfg.Metrics == nil || cfg.Keys == nil || cfg.AuditTrail == nil {
		return nil, errors.New("httpapi: Registry, Line, Admissions, Metrics, Keys and AuditTrail are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Captcha == nil {
		cfg.Captcha = captcha.New(captcha.Config{})
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context, ReadyChecks) error { return nil }
	}
	cfg.AdminFailures = cmp.Or(cfg.AdminFailures, DefaultAdminFailures)
	cfg.AdminFailureWindow = cmp.Or(cfg.AdminFailureWindow, DefaultAdminFailureWindow)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout)
	cfg.RefusalHold = cmp.Or(cfg.RefusalHold, DefaultRefusalHold)
	a := &API{cfg: cfg, mux: http.NewServeMux(), streams: map[string]bool{}, adminFails: ratelimit.New(cfg.Now),
		refusals: ratelimit.NewRefusals(cfg.Now), deadlines: &deadlines{timeout: cfg.RequestTimeout}}
	m := a.mux
	// The admin routes: authenticated once each, before the handler, with the least role each
	// needs (HandleAdmin; the table is docs/api.md's).
	read, operate, keys := admin.RoleReadOnly, admin.RoleOperator, admin.RoleKeyAdmin
	a.HandleAdmin("GET /v1/events", read, a.listEvents)
	a.HandleAdmin("PUT /v1/events/{event_id}", operate, a.putEvent)
	a.HandleAdmin("PATCH /v1/events/{event_id}", operate, a.patchEvent)
	a.HandleAdmin("POST /v1/events/{event_id}/close", operate, a.closeEvent)
	a.HandleAdmin("POST /v1/events/{event_id}/extend", operate, a.extendSessions)
	a.HandleAdmin("DELETE /v1/events/{event_id}", operate, a.deleteEvent)
	a.HandleAdmin("GET /v1/audit", read, a.auditTrail)
	a.HandleAdmin("GET /v1/captcha/siteverify-urls", read, a.siteverifyURLs)
	if cfg.History != nil {
		a.HandleAdmin("GET /v1/events/{event_id}/history", read, a.eventHistory)
		a.HandleAdmin("GET /v1/instances", read, a.instances)
		a.HandleAdmin("GET /v1/events/{event_id}/report", read, a.eventReport)
	}
	if cfg.Signals != nil && cfg.AutoStore != nil && cfg.AutoHistory != nil {
		a.HandleAdmin("POST /v1/events/{event_id}/health", admin.RoleHealthReporter, a.reportHealth)
		a.HandleAdmin("GET /v1/events/{event_id}/auto", read, a.eventAuto)
	}
	a.HandleAdmin("POST /v1/admin/keys", keys, a.createKey)
	a.HandleAdmin("GET /v1/admin/keys", keys, a.listKeys)
	a.HandleAdmin("DELETE /v1/admin/keys/{name}", keys, a.revokeKey)
	m.HandleFunc("GET /v1/events/{event_id}", a.getEvent)
	m.HandleFunc("GET /v1/events/{event_id}/challenge", a.getChallenge)
	m.HandleFunc("POST /v1/events/{event_id}/tickets", a.join)
	m.HandleFunc("GET /v1/events/{event_id}/tickets/{ticket_id}", a.status)
	m.HandleFunc("DELETE /v1/events/{event_id}/tickets/{ticket_id}", a.leave)
	m.HandleFunc("GET /v1/events/{event_id}/admission", a.admission)
	m.HandleFunc("GET /v1/events/{event_id}/draw", a.getDraw)
	m.HandleFunc("GET /.well-known/jwks.json", a.jwks)
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpjson.WriteJSON(w, 200, map[string]string{"status": "ok", "version": buildinfo.Get().Version})
	})
	m.HandleFunc("GET /readyz", a.readyz)
	metricsHandler := a.MetricsHandler()
	m.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if !cfg.MetricsPublic {
			if _, p := a.Authenticate(r, admin.RoleReadOnly); p != nil {
				httpjson.WriteProblem(w, p)
				return
			}
		}
		metricsHandler.ServeHTTP(w, r)
	})
	m.Handle("GET /openapi.json", apidoc.Handler())
	return a, nil
}

// Handle registers an extra handler on the API's mux (web pages, the sale's routes); its
// requests are bounded by Config.RequestTimeout.
func (a *API) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// HandleStream registers a handler of long-lived connections (WebSocket, SSE): its requests
// carry no RequestTimeout, so the handler bounds its own store calls. Call before serving.
func (a *API) HandleStream(pattern string, h http.Handler) {
	a.streams[pattern] = true
	a.mux.Handle(pattern, h)
}

// ServeHTTP routes the request, turning the mux's own 404 and 405 into problems, recovering
// from panics as 500 problems, and observing latency per route. Every request but those of
// HandleStream routes gets the deadline Config.RequestTimeout (to within deadlineGrain, see
// deadlines): this one place bounds what every handler waits on Redis and PostgreSQL.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Until this returns, net/http's background read of the connection is deferred (it costs
	// a system call a request; connlimit.DeferBackgroundRead): the request's context ends at
	// its deadline, not with its client. A stream, whose context must end with its client, and
	// a refusal held (which ends early when its client goes) have it made after all.
	bg := connlimit.DeferBackgroundRead(r.Context())
	sw := &statusWriter{ResponseWriter: w, code: 200}
	reqID := httpjson.RequestID(r)
	sw.Header()["X-Request-Id"] = []string{reqID} // canonical already
	defer func() {
		if bg != nil {
			bg.EndDeferredRead()
		}
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			a.cfg.Logger.Error("panic in handler", "panic", v, "path", loggedPath(r))
			if !sw.wrote {
				httpjson.WriteProblem(sw, httpjson.NewProblem(500, "internal_error", "an internal error occurred"))
			}
		}
		route := r.Pattern
		if _, path, ok := strings.Cut(route, " "); ok {
			route = path // the method is a label of its own
		}
		if route == "" {
			route = "unmatched"
		}
		took := time.Since(start)
		a.cfg.Metrics.ObserveHTTP(route, r.Method, sw.code, took)
		a.countHistory(r, sw.code)
		if a.cfg.AccessLog != nil && (sw.code >= 500 || (a.cfg.AccessLogSample > 0 && mrand.Float64() < a.cfg.AccessLogSample)) {
			// client is who the limits count (package clientaddr: a trusted proxy's forwarding
			// header, else the peer), as the audit trail names it; peer the connection's, when
			// it is another (the load balancer).
			attrs := []slog.Attr{slog.String("request_id", reqID), slog.String("method", r.Method), slog.String("route", route),
				slog.String("path", loggedPath(r)), slog.Int("status", sw.code),
				slog.Float64("duration_ms", float64(took.Microseconds())/1000)}
			client, peer := a.clientAddress(r), clientHost(r)
			attrs = append(attrs, slog.String("client", client))
			if peer != client {
				attrs = append(attrs, slog.String("peer", peer))
			}
			a.cfg.AccessLog.LogAttrs(r.Context(), slog.LevelInfo, "http", attrs...)
		}
	}()
	if r.ContentLength != 0 {
		// A per-request deadline rather than the server's ReadTimeout, which would also end
		// the SSE streams (their context is cancelled when the connection's read fails); on a
		// connection of the limiter's, set only if the body is read from the socket.
		if by := time.Now().Add(a.cfg.BodyTimeout); !connlimit.SetBodyDeadline(r.Context(), by) {
			_ = http.NewResponseController(sw).SetReadDeadline(by)
		}
	}
	if p := httpjson.UncleanPath(r); p != nil {
		httpjson.WriteProblem(sw, p)
		return
	}
	_, origin := r.Header["Origin"]
	if origin && r.Method == http.MethodOptions && r.Header["Access-Control-Request-Method"] != nil {
		if _, own := a.mux.Handler(r); own == "" { // a path with an OPTIONS route answers it itself
			a.preflight(sw, r)
			return
		}
	}
	h, pattern := a.mux.Handler(r)
	if pattern == "" {
		httpjson.MuxMiss(sw, r, h) // the mux's own 404/405, as problems
		return
	}
	if origin && corsRoutes[pattern] {
		// Vary whatever the verdict: the answer depends on the Origin sent.
		sw.Header().Add("Vary", "Origin")
		if a.cfg.Origins.Allowed(r) {
			setCORS(sw.Header(), r)
		}
	}
	if what, ok := originRoutes[pattern]; ok && origin && !a.cfg.Origins.Check(r) {
		httpjson.WriteProblem(sw, httpjson.NewProblem(403, "origin_not_allowed",
			what+" from "+originPages(r)+" are not allowed (--allowed-origins)"))
		return
	}
	client := r.Context() // cancelled when the client goes away
	if a.deadlines.timeout > 0 && !a.streams[pattern] {
		r = r.WithContext(a.deadlines.bound(client, start))
	} else if bg != nil {
		bg.UndeferBackgroundRead()
	}
	a.mux.ServeHTTP(sw, r)
	if (sw.code == http.StatusTooManyRequests || sw.held) && a.cfg.RefusalHold > 0 {
		// Config.RefusalHold. The answer is still in net/http's buffer (a problem is far below
		// its 2 KB; nothing flushes it), which sends it when this returns.
		if bg != nil {
			bg.UndeferBackgroundRead()
		}
		t := time.NewTimer(a.cfg.RefusalHold)
		select {
		case <-t.C:
		case <-client.Done():
			t.Stop()
		}
	}
}

// CountBooking counts a booking request's outcome in waitroom_bookings_total.
func (a *API) CountBooking(event, outcome string) {
	a.cfg.Metrics.Bookings.WithLabelValues(event, outcome).Inc()
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
	held  bool // a problem marked Held was written (httpjson.Holder)
}

// Hold marks the answer to be held before it is sent (Config.RefusalHold).
func (w *statusWriter) Hold() { w.held = true }

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush, hijack for WebSocket).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack takes the connection over for a WebSocket, whose handshake answers 101 Switching
// Protocols on it: the access log and the metrics count that, not the 200 of an answer never
// written through w.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && !w.wrote {
		w.code, w.wrote = http.StatusSwitchingProtocols, true
	}
	return nc, rw, err
}

func (a *API) jwks(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(a.cfg.Admissions.JWKS())
}

// MetricsHandler serves the Prometheus metrics (the command line mounts it on --metrics-addr).
func (a *API) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(a.cfg.Metrics.Gatherer(), promhttp.HandlerOpts{})
}

// ClientKey is the key of r's client for the limits per client (see package clientaddr).
func (a *API) ClientKey(r *http.Request) string { return a.cfg.Clients.Key(r) }

// OriginAllowed reports whether r's Origin, if any, may use the line (Config.Origins), for a
// request refused when it may not (a WebSocket handshake): the refusal is noticed
// (origin.Policy.Check).
func (a *API) OriginAllowed(r *http.Request) bool { return a.cfg.Origins.Check(r) }

// StoreError writes the problem of an error about an event: the events' configuration table
// (eventProblems), else the line's one table (line.Service.Problem: its rules, the line store's
// errors, and 503 store_unavailable for a store or database that did not answer).
func (a *API) StoreError(w http.ResponseWriter, err error, eventID string) {
	if p, ok := eventProblems.Problem(err, eventID); ok {
		httpjson.WriteProblem(w, p)
		return
	}
	httpjson.WriteProblem(w, a.cfg.Line.Problem(err, eventID))
}

// loggedPath is r's path as the logs show it: a ticket id is a bearer capability (a GET of it
// returns a fresh admission token, a DELETE gives up the place), so only its first 6
// characters are kept, enough to tell tickets apart in a log, not to use one. It goes by the
// path's shape (/v1/events/{event_id}/tickets/{ticket_id}...), not the route matched: a path
// no route serves (a 404, a 405) is logged too.
func loggedPath(r *http.Request) string {
	p := r.URL.Path
	const prefix = "/v1/events/"
	if !strings.HasPrefix(p, prefix) {
		return p
	}
	ev, rest, ok := strings.Cut(p[len(prefix):], "/")
	rest, found := strings.CutPrefix(rest, "tickets/")
	if !ok || !found {
		return p
	}
	id, tail, _ := strings.Cut(rest, "/")
	if len(id) <= 6 {
		return p
	}
	out := prefix + ev + "/tickets/" + id[:6] + "…"
	if len(tail) > 0 || strings.HasSuffix(rest, "/") {
		out += "/" + tail
	}
	return out
}
