package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/metrics"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/token"
)

// countingLine counts every call to the line store (each is a Redis round trip).
type countingLine struct {
	queue.Store
	calls atomic.Int64
}

func (c *countingLine) Join(ctx context.Context, p queue.JoinParams) (queue.Ticket, error) {
	c.calls.Add(1)
	return c.Store.Join(ctx, p)
}

func (c *countingLine) Status(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	c.calls.Add(1)
	return c.Store.Status(ctx, ref)
}

func (c *countingLine) Complete(ctx context.Context, ref queue.TicketRef) error {
	c.calls.Add(1)
	return c.Store.Complete(ctx, ref)
}

func (c *countingLine) Leave(ctx context.Context, ref queue.TicketRef) error {
	c.calls.Add(1)
	return c.Store.Leave(ctx, ref)
}

// benchEvents are the gate target's events: the event newEvent wrote to the line store, with
// the defaults (no registry, no database in this group).
type benchEvents struct{}

func (benchEvents) Cached(id string) (event.Event, bool) {
	return event.Event{ID: id}.WithDefaults(), true
}

func (b benchEvents) Get(_ context.Context, id string) (event.Event, error) {
	e, _ := b.Cached(id)
	return e, nil
}

func (benchEvents) Restore(context.Context, string) error { return queue.ErrEventNotFound }

// serveLocal serves h on a free loopback port until the returned stop is called.
func serveLocal(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// gateTargets: requests of an admitted visitor through the gate (line on this run's Redis) to a
// trivial origin, against a bare httputil.ReverseProxy to the same origin, in interleaved
// rounds, in this process. The gate's hot path verifies the admission offline; the line store
// is asked at most once per ticket every few seconds, which the line reports.
func (e *env) gateTargets(ctx context.Context, rep *Report) {
	const id = "gate/proxy"
	ev := "gate-" + randomKey()[:8]
	if _, err := e.newEvent(ctx, ev, 10); err != nil {
		rep.fail(id, err)
		return
	}
	defer func() { _ = e.store.DeleteEvent(context.Background(), ev) }()
	origin, stopOrigin, err := serveLocal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	}))
	if err != nil {
		rep.fail(id, err)
		return
	}
	defer stopOrigin()
	ou, _ := url.Parse(origin)
	transport := func() *http.Transport {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 0, 512
		return t
	}
	bareProxy := httputil.NewSingleHostReverseProxy(ou)
	bareProxy.Transport = transport()
	bare, stopBare, err := serveLocal(bareProxy)
	if err != nil {
		rep.fail(id, err)
		return
	}
	defer stopBare()

	secret, err := token.GenerateSecret()
	var keys token.Keys
	if err == nil {
		if keys, err = token.DeriveKeys(secret); err == nil {
			err = e.runGate(ctx, rep, id, ev, origin, bare, keys, transport(), false)
		}
	}
	if err != nil {
		rep.fail(id, err)
		return
	}
	// The same in admission mode auto: the gate measures every request it passes (latency,
	// status) into the instance's signals, flushed to the store every 250 ms (issue 23).
	if err := e.runGate(ctx, rep, id+"-auto", ev, origin, bare, keys, transport(), true); err != nil {
		rep.fail(id+"-auto", err)
	}
}

func (e *env) runGate(ctx context.Context, rep *Report, id, ev, origin, bare string, keys token.Keys, tr http.RoundTripper, auto bool) error {
	f, err := gateway.Parse("bench", []byte("sites:\n  - origin: "+origin+"\n    protect:\n      - event: "+ev+"\n        paths: [/checkout]\n"))
	if err != nil {
		return err
	}
	counted := &countingLine{Store: e.store}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lines, err := line.New(line.Config{Store: counted, Events: benchEvents{}, Tickets: token.NewTicketIDs(keys.TicketMAC), Logger: quiet})
	if err != nil {
		return err
	}
	// As serve runs it: every answer of the listener in the request histogram.
	gcfg := gateway.Config{File: f, Line: lines, Admissions: token.NewAdmissions(keys), Transport: tr, Logger: quiet,
		Observe: metrics.New(metrics.Config{Logger: quiet}).ObserveHTTP}
	mode := "fixed"
	if auto {
		mode = "auto (measuring every request, flushed to Redis every 250 ms)"
		gcfg.Signals = new(autoadmit.Signals)
		fctx, stopFlush := context.WithCancel(ctx)
		defer stopFlush()
		go func() {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-fctx.Done():
					return
				case <-t.C:
					for ev, d := range gcfg.Signals.Take() {
						_ = e.store.AddSignals(fctx, ev, d)
					}
				}
			}
		}()
	}
	g, err := gateway.New(gcfg)
	if err != nil {
		return err
	}
	gate, stopGate, err := serveLocal(g)
	if err != nil {
		return err
	}
	defer stopGate()

	// The admitted visitor: its cookie holds the admission (renewed by the gate as it goes).
	// Both sides send it, through the same client code, so that only the proxies differ.
	resp, err := http.Get(gate + "/checkout")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.Cookies()) == 0 {
		return fmt.Errorf("the visitor was not admitted at join: %d", resp.StatusCode)
	}
	cookie := &cookieHolder{}
	cookie.v.Store(resp.Cookies()[0].String())
	gc, bc := newLoadClient(httpConns), newLoadClient(httpConns)
	defer gc.CloseIdleConnections()
	defer bc.CloseIdleConnections()
	gc.Transport = &cookieTransport{base: gc.Transport, c: cookie}
	bc.Transport = &cookieTransport{base: bc.Transport, c: cookie}

	var gr, br []float64
	var requests float64
	callsBefore := counted.calls.Load()
	for round := range e.cfg.Rounds {
		for i := range 2 {
			if (i+round)%2 == 0 {
				r, err := httpLoad(ctx, bc, http.MethodGet, bare+"/checkout", httpConns, time.Second, e.cfg.HTTPDuration)
				if err != nil {
					return fmt.Errorf("bare reverse proxy: %w", err)
				}
				br = append(br, r.rate)
				e.progress("round %d: bare httputil.ReverseProxy: %.0f/s, p50 %s, p99 %s", round+1, r.rate, r.p50, r.p99)
			} else {
				r, err := httpLoad(ctx, gc, http.MethodGet, gate+"/checkout", httpConns, time.Second, e.cfg.HTTPDuration)
				if err != nil {
					return fmt.Errorf("gate: %w", err)
				}
				if r.errors > 0 {
					return fmt.Errorf("gate: %d requests not let through", r.errors)
				}
				gr = append(gr, r.rate)
				requests += r.rate * e.cfg.HTTPDuration.Seconds()
				e.progress("round %d: gate, admitted visitor: %.0f/s, p50 %s, p99 %s", round+1, r.rate, r.p50, r.p99)
			}
		}
	}
	if len(gr) == 0 || len(br) == 0 {
		return errors.New("no round measured")
	}
	calls := counted.calls.Load() - callsBefore
	ratio := median(gr) / median(br)
	rep.add(id, holds(ratio >= 0.8),
		"gate (line on Redis), admission mode %s, admitted visitor GET /checkout to a trivial origin: %s/s (rounds %s) vs bare httputil.ReverseProxy to the same origin: %s/s (rounds %s); %d keep-alive connections, %s a round; line store calls (Redis round trips) during the gate's rounds: %d for ~%s requests (activity refreshes) = %.2f (target >= 0.8)",
		mode, thousands(median(gr)), rates(gr), thousands(median(br)), rates(br), httpConns, e.cfg.HTTPDuration, calls, thousands(requests), ratio)
	return nil
}

// cookieHolder is the visitor's current cookie ("name=value").
type cookieHolder struct{ v atomic.Value }

// cookieTransport sends the visitor's cookie with every request, and keeps the one the gate
// renews: a browser's cookie jar, reduced to the one cookie.
type cookieTransport struct {
	base http.RoundTripper
	c    *cookieHolder
}

func (t *cookieTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Cookie", t.c.v.Load().(string))
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		if sc := resp.Header.Get("Set-Cookie"); sc != "" {
			if i := strings.IndexByte(sc, ';'); i > 0 {
				t.c.v.Store(sc[:i])
			}
		}
	}
	return resp, err
}
