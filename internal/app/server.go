package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/metrics"
)

// service is the one shape of everything the App starts and stops (after River's startstop):
// Start returns once the component runs (its loops and listeners started), Stop once it has
// ended, bounded by ctx where it waits on others. Both are safe to call once each, Stop also
// before Start and twice.
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// component is one entry of the App's start/stop list. An opened component was opened by New
// (the database, the backend, the embedded line), so it is stopped (closed, saved) even when
// Start never ran or failed before it.
type component struct {
	name   string
	svc    service
	opened bool
	// serves: it serves requests (a listener, push), so its Stop is bounded by the one
	// ShutdownGrace that all of them share (App.Stop).
	serves bool
}

// closer is a component that New opened and Stop closes: nothing to start.
type closer func(ctx context.Context) error

func (closer) Start(context.Context) error      { return nil }
func (c closer) Stop(ctx context.Context) error { return c(ctx) }

// httpServer is one of the App's listeners (the API, the gate, --metrics-addr): Start serves
// it, Stop stops accepting and gives the requests in flight grace to finish. Every one of them
// is served through the drain (Run) and shut down the same way, and its connections are
// bounded by the App's one connlimit.Limiter. With no listener it is a no-op.
type httpServer struct {
	name  string
	ln    *connlimit.Listener // nil: none
	srv   *http.Server
	grace time.Duration
	ended chan<- error // the App's: a server that ends by itself ends Run
}

// noticing passes every request of a listener to clients.Notice first (a load balancer missing
// from --trusted-proxies is said, whichever listener it sends to), then to h.
func noticing(clients *clientaddr.Resolver, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clients.Notice(r)
		h.ServeHTTP(w, r)
	})
}

// DefaultIdleTimeout is how long a keep-alive connection may wait for its next request while
// the instance is not busy (Config.IdleTimeout, --idle-timeout); when it is, connlimit closes
// those idle for --busy-idle-timeout.
const DefaultIdleTimeout = 120 * time.Second

// newServer returns the server of h on ln (nil: none), named listener to the limits and the
// metrics, closing keep-alive connections idle for idle. Headers must come within 5 s; bodies
// are read under the handler's own deadline (httpapi.Config.BodyTimeout), not a ReadTimeout,
// which would also end the SSE streams.
func newServer(name, listener string, ln net.Listener, h http.Handler, lim *connlimit.Limiter, m *metrics.Metrics,
	idle, grace time.Duration, ended chan<- error, log *slog.Logger, adminCheck func(*http.Request) (bool, *httpjson.Problem)) *httpServer {
	s := &httpServer{name: name, grace: grace, ended: ended, srv: &http.Server{
		Handler: reserveGuard(asteriskForm(h), lim.Config().BusyIdleTimeout, adminCheck,
			func() { m.ConnsRefused.WithLabelValues(listener, "reserve").Inc() }),
		ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idle, MaxHeaderBytes: MaxHeaderBytes,
		ConnState: lim.ConnState, ConnContext: connlimit.ConnContext,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	if ln != nil {
		s.ln = lim.Listen(ln, listener)
	}
	return s
}

// open is the number of connections open on the server's listener.
func (s *httpServer) open() int {
	if s.ln == nil {
		return 0
	}
	return s.ln.Open()
}

// asteriskForm answers a request whose target is "*" (RFC 9112 section 3.2.4), which net/http
// passes to the handler (but OPTIONS *, which it answers itself): the HTTP/2 connection preface
// ("PRI * HTTP/2.0", sent to an HTTP/1 listener) 505 unsupported_http_version, any other 400
// malformed_request, as net/http's own answers to requests that do not parse are
// (httpjson.FramingAnswer), instead of each listener's 404 of a path "*" or net/http's ServeMux's
// bare 400. The connection closes.
func asteriskForm(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RequestURI != "*" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if r.Method == "PRI" && r.ProtoMajor == 2 {
			httpjson.WriteProblem(w, httpjson.NewProblem(http.StatusHTTPVersionNotSupported, "unsupported_http_version",
				"an HTTP/2 connection preface: this listener speaks HTTP/1.1 only"))
			return
		}
		httpjson.WriteProblem(w, httpjson.NewProblem(http.StatusBadRequest, "malformed_request",
			"the request target * is for OPTIONS only (RFC 9112 section 3.2.4)"))
	})
}

// reserveGuard serves, on a connection of connlimit's reserve (the instance holds nearly
// --max-conns connections and none of them is idle), only what the reserve is kept for
// (reserveServes): the health checks, the metrics scrape and admin calls. Any
// other request is answered 503 too_many_connections with Retry-After (retry, the time in
// which idle connections are closed while busy). Every answer on the reserve closes its
// connection at once: one request each, and never a wait for a body the handler did not read
// (net/http reads what is left of a body before it answers, and again as it closes, up to the
// connection's deadline: a request that announces a body and never sends it held a
// connection of the reserve for its whole deadline).
func reserveGuard(h http.Handler, retry time.Duration, adminCheck func(*http.Request) (bool, *httpjson.Problem), refused func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !connlimit.Serving(r.Context()) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		// What is left unread of the body is not waited for either, once answered (net/http
		// reads it on closing, up to the deadline): the connection closes at once.
		defer func() { _ = http.NewResponseController(w).SetReadDeadline(time.Now()) }()
		serves, p := reserveServes(r, adminCheck)
		if p != nil {
			httpjson.WriteProblem(w, p) // a client past its limit of wrong admin keys
			return
		}
		if !serves {
			refused()
			p := httpjson.NewProblem(http.StatusServiceUnavailable, "too_many_connections",
				"the instance holds its maximum of connections; retry after Retry-After")
			p.RetryAfter = max(retry, time.Second)
			httpjson.WriteProblem(w, p)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// reserveServes reports whether r is one of the requests a connection of the reserve serves:
// GET or HEAD /healthz, /readyz and /metrics without a body (a probe sends none), and requests
// whose bearer is a live admin key (adminCheck, before anything else of the request is read;
// the handler checks the key again as always; nil: none, the gate's listener, where admin keys
// are not honoured). Nothing else: a body takes time to come, a stream or a slow origin holds
// the connection, and an Authorization header anyone can make up must not buy them a
// connection of the reserve. A bearer that is not a live key is counted against its client as
// a wrong admin key is at every door, and a client past the limit is answered its 429 (p),
// whatever key it sends: uncounted, the reserve's 503 to a wrong key and service to a right
// one told them apart without limit.
func reserveServes(r *http.Request, adminCheck func(*http.Request) (bool, *httpjson.Problem)) (serves bool, p *httpjson.Problem) {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.ContentLength == 0, nil
	}
	if adminCheck == nil || r.Header.Get("Authorization") == "" {
		return false, nil
	}
	return adminCheck(r)
}

// Start serves in the background. It never fails: the listener is open already.
func (s *httpServer) Start(context.Context) error {
	if s.ln == nil {
		return nil
	}
	go func() {
		err := s.srv.Serve(s.ln)
		if !errors.Is(err, http.ErrServerClosed) {
			s.ended <- errors.Join(errors.New(s.name+" ended"), err)
		}
	}()
	return nil
}

// Stop stops accepting, closes idle connections and waits for the requests in flight, at most
// the grace (or until ctx ends); then it closes what is left. Hijacked connections (WebSocket)
// are not waited for: the push hub, stopped first, closes them.
func (s *httpServer) Stop(ctx context.Context) error {
	if s.ln == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, s.grace)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		_ = s.srv.Close()
	}
	_ = s.ln.Close() // a server stopped before it served still holds its listener
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// metricsMux serves h at GET /metrics (the --metrics-addr listener), and with profiles Go's
// profiles at /debug/pprof/.
func metricsMux(h http.Handler, profiles bool) http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", h)
	if profiles {
		// --pprof: Go's profiles, on this listener only (it is the operator's, not the public's).
		m.HandleFunc("/debug/pprof/", pprof.Index)
		m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		m.HandleFunc("/debug/pprof/profile", pprof.Profile)
		m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	// A path the mux has no route for, or one it would redirect (not clean), is a problem as on
	// the API's listener (pprof's own answers, an unknown profile's 404, are pprof's).
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := httpjson.UncleanPath(r); p != nil {
			httpjson.WriteProblem(w, p)
			return
		}
		if h, pattern := m.Handler(r); pattern == "" {
			httpjson.MuxMiss(w, r, h)
			return
		}
		m.ServeHTTP(w, r)
	})
}

// adminCheck reports whether r's bearer is a live admin key of any role (the root key or a
// named one), for the reserve. A bearer shaped like a JWT (three dot-separated parts) is
// checked without counting: it is one of the line's own tokens (an admission token sent to
// its online check, a booking's, a user's identity), which a shop's back end sends on every
// call, and must not lock its address out of the admin API. Any other bearer is checked as an
// admin call's (httpapi.API.Authenticate: a wrong key counted against its client); p is the 429
// of a client past --admin-failures a minute (nil otherwise: a wrong key, or keys that could
// not be read, is no live key).
func (a *App) adminCheck(r *http.Request) (live bool, p *httpjson.Problem) {
	if tok, ok := httpjson.Bearer(r); ok && strings.Count(tok, ".") == 2 {
		if a.Keys == nil {
			return false, nil
		}
		_, err := a.Keys.Check(r.Context(), tok)
		return err == nil, nil
	}
	_, p = a.API.Authenticate(r, admin.RoleReadOnly)
	switch {
	case p == nil || p.Code == "insufficient_role" || p.Code == "insufficient_scope":
		// A live key (a health reporter's, or one scoped to events: the request is not routed
		// yet, so it names no event): the handler decides.
		return true, nil
	case p.Status == http.StatusTooManyRequests:
		return false, p
	}
	return false, nil
}
