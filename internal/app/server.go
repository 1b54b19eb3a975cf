package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/internal/clientaddr"
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
}

// closer is a component that New opened and Stop closes: nothing to start.
type closer func(ctx context.Context) error

func (closer) Start(context.Context) error      { return nil }
func (c closer) Stop(ctx context.Context) error { return c(ctx) }

// httpServer is one of the App's listeners (the API, the gate, --metrics-addr): Start serves
// it, Stop stops accepting and gives the requests in flight grace to finish. Every one of them
// is served through the drain (Run) and shut down the same way. With no listener it is a
// no-op.
type httpServer struct {
	name  string
	ln    net.Listener
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

// newServer returns the server of h on ln (nil: none). Headers must come within 5 s; bodies
// are read under the handler's own deadline (httpapi.Config.BodyTimeout), not a ReadTimeout,
// which would also end the SSE streams.
func newServer(name string, ln net.Listener, h http.Handler, grace time.Duration, ended chan<- error, log *slog.Logger) *httpServer {
	return &httpServer{name: name, ln: ln, grace: grace, ended: ended, srv: &http.Server{
		Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
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

// metricsMux serves h at GET /metrics (the --metrics-addr listener).
func metricsMux(h http.Handler) http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", h)
	return m
}
