package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/buildinfo"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/httpjson"
)

// An instance of the scale-out deployment that starts while Redis or PostgreSQL does not
// answer yet (a whole cluster cold-started, a store failing over, a Service name that does not
// resolve yet) waits for them instead of exiting (Config.WaitForStores): exiting would leave
// the restart to the supervisor, whose back-off grows (Kubernetes' CrashLoopBackOff up to 5
// min, Docker's restart policy up to 1 min), so instances would come back minutes after their
// stores did. While it waits, the API's listener answers GET and HEAD /healthz 200 (the process
// is alive: a liveness probe does not restart it) and /readyz 503 store_unavailable (a
// readiness probe keeps it out of its Service); every other request, and every request on the
// gate's and the metrics listener, has its connection closed unanswered, as a stopped
// instance's would be refused: a load balancer without health checks of its own (nginx's
// passive max_fails, the compose file's and the forward-auth example's) counts that as a failed
// instance and sends the request, and the next ones for a while, to another, where an answer of
// 503 would have been passed on to the visitor. Only a store that cannot be reached is waited
// for; a wrong key, password or database name still fails at once.

// Bounds of the wait between two attempts: it doubles from storeRetryFirst up to
// storeRetryMax, each wait drawn within ±20 % so that a fleet restarted together does not
// reconnect in step to a store that is just coming back.
const (
	storeRetryFirst = 500 * time.Millisecond
	storeRetryMax   = 5 * time.Second
)

// newWaiting is New for cfg.WaitForStores: build is retried, with a growing wait, for as long
// as it fails because a store does not answer (storeUnreachable) and ctx lasts; from its first
// failure cfg's listeners answer the probes and refuse the rest (serveStarting). Errors:
// build's last one when it is not a store's that does not answer; ctx's when ctx ends first.
func newWaiting(ctx context.Context, cfg Config) (*App, error) {
	var w *startingServers
	defer func() { w.stop() }() // before the App's servers take the listeners over
	wait := storeRetryFirst
	for attempt := 1; ; attempt++ {
		a, err := build(ctx, cfg)
		if err == nil || !storeUnreachable(err) || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil {
				return nil, errors.Join(ctx.Err(), err)
			}
			return a, err
		}
		d := time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
		if w == nil {
			w = serveStarting(cfg, err, d)
			cfg.Logger.Warn("waiting for the stores: /healthz answers, /readyz 503, other requests are refused until they answer",
				"addr", cfg.Listener.Addr().String())
		} else {
			w.failed(err, d)
		}
		cfg.Logger.Warn("a store does not answer", "err", err, "attempt", attempt, "retry_in", d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
		wait = min(2*wait, storeRetryMax)
	}
}

// storeUnreachable reports whether err says that a store could not be reached or is not taking
// connections yet, which waiting may cure: a network error (refused, reset, timed out, a name
// not resolved: a net.Error, which a syscall.Errno and context.DeadlineExceeded are too), a
// connection closed mid-handshake, PostgreSQL's connection exceptions (class
// 08), its "starting up" or "shutting down" (57P01-57P03), too many connections (53300) and a
// read-only standby (25006: a failover whose address still names the old primary), Redis
// loading its data set, without a master, or at its maxclients (LOADING, MASTERDOWN,
// CLUSTERDOWN, TRYAGAIN, "ERR max number of clients reached"). A wrong password, an unknown
// database or a Redis too old are not: waiting would not change them. (An address that names
// another service, or TLS to a Redis without it, fails as a network error does and is waited
// for: /readyz and the log say what failed.)
func storeUnreachable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "57P01", "57P02", "57P03", "53300", "25006":
			return true
		}
		return strings.HasPrefix(pg.Code, "08")
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) && re != rueidis.Nil {
		msg := re.Error()
		for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return strings.Contains(msg, "max number of clients reached") // ERR, as Redis words it
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// startingServers serves the instance's listeners while New waits for the stores, and gives
// the listeners back open.
type startingServers struct {
	mu    sync.Mutex
	err   error         // the last attempt's
	retry time.Duration // the wait before the next attempt
	srvs  []*http.Server
	lns   []*pausable
	done  sync.WaitGroup
}

// serveStarting serves the API's listener (probes) and the gate's and the metrics listener
// (nothing) of cfg, err being the first attempt's and retry the wait before the next.
func serveStarting(cfg Config, err error, retry time.Duration) *startingServers {
	w := &startingServers{err: err, retry: retry}
	for i, ln := range []net.Listener{cfg.Listener, cfg.GateListener, cfg.MetricsListener} {
		if _, ok := ln.(deadliner); !ok {
			continue // none, or one whose Accept Close could not interrupt: not served meanwhile
		}
		p := &pausable{Listener: ln}
		srv := &http.Server{Handler: w.handler(i == 0), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
			MaxHeaderBytes: MaxHeaderBytes, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
		w.srvs, w.lns = append(w.srvs, srv), append(w.lns, p)
		w.done.Go(func() { _ = srv.Serve(p) })
	}
	return w
}

func (w *startingServers) failed(err error, retry time.Duration) {
	w.mu.Lock()
	w.err, w.retry = err, retry
	w.mu.Unlock()
}

// handler answers, with probes (the API's listener), GET and HEAD /healthz 200
// {"status":"starting"} and /readyz 503 store_unavailable (with the last attempt's error, as
// /readyz says why it is not ready; Retry-After the wait before the next attempt, at least
// 1 s); every other request's connection is closed unanswered. Every answer closes its
// connection, so that none is left idle on this server at the hand-over.
func (w *startingServers) handler(probes bool) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		probe := probes && (r.Method == http.MethodGet || r.Method == http.MethodHead)
		switch {
		case probe && r.URL.Path == "/healthz":
			rw.Header().Set("Connection", "close")
			httpjson.WriteJSON(rw, 200, map[string]string{"status": "starting", "version": buildinfo.Get().Version})
		case probe && r.URL.Path == "/readyz":
			if _, p := httpapi.ReadyExclusions(r); p != nil { // a probe's typo shows now, not once started
				rw.Header().Set("Connection", "close")
				httpjson.WriteProblem(rw, p)
				return
			}
			w.mu.Lock()
			err, retry := w.err, w.retry
			w.mu.Unlock()
			p := httpjson.NewProblem(http.StatusServiceUnavailable, "store_unavailable", "not ready: waiting for the stores: "+err.Error())
			p.RetryAfter = max(retry, time.Second)
			rw.Header().Set("Connection", "close")
			httpjson.WriteProblem(rw, p)
		default:
			// As a refused connection: a balancer tries another instance (a GET at once).
			panic(http.ErrAbortHandler)
		}
	})
}

// stop ends the starting servers (nil: nothing to stop): each stops accepting, its requests
// in flight finish (they do not wait on anything) and its idle connections close; the
// listeners stay open, their queued connections for the App's servers.
func (w *startingServers) stop() {
	if w == nil {
		return
	}
	// A probe is answered at once; what is left after a second (a client trickling its request
	// head) is cut off rather than holding up the hand-over.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, srv := range w.srvs {
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}
	w.done.Wait()
	for _, p := range w.lns {
		p.resume()
	}
}

// pausable is a listener whose Close only interrupts its Accept (a deadline in the past), so
// that an http.Server can be shut down on it and another one serve it after: resume lifts the
// deadline. A connection the kernel queued meanwhile waits for the next Accept.
type pausable struct {
	net.Listener
	mu     sync.Mutex
	closed bool
}

type deadliner interface{ SetDeadline(time.Time) error }

func (p *pausable) Accept() (net.Conn, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, net.ErrClosed
	}
	c, err := p.Listener.Accept()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		if c != nil {
			_ = c.Close() // accepted as the server stopped: its client retries
		}
		return nil, net.ErrClosed
	}
	return c, err
}

func (p *pausable) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		if d, ok := p.Listener.(deadliner); ok {
			_ = d.SetDeadline(time.Unix(1, 0))
		}
	}
	return nil
}

func (p *pausable) resume() {
	if d, ok := p.Listener.(deadliner); ok {
		_ = d.SetDeadline(time.Time{})
	}
}
