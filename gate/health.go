package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/originhealth"
)

// The health report of admission mode auto (docs/autoadmit.md): with Config.HealthKey set, the
// middleware measures every admitted request it passes to the site (the time until the site
// writes its status, and whether that status is 5xx) and POSTs what it saw every
// Config.HealthEvery to {WaitingRoomURL}/v1/events/{EventID}/health as
// {"requests": N, "errors": E, "p95_ms": P}, so that the waiting room admits at the rate the
// site is measured to take. A report that fails is dropped (the next one carries the next
// second); the site's requests never wait for it.

type health struct {
	mu       sync.Mutex
	period   originhealth.Period // the admitted requests since the last report, by session and client
	url, key string
	client   *http.Client
	timeout  time.Duration
}

func newHealth(cfg Config) *health {
	return &health{url: cfg.WaitingRoomURL + "/v1/events/" + cfg.EventID + "/health",
		key: cfg.HealthKey, client: cfg.HTTPClient, timeout: cfg.RequestTimeout}
}

func (h *health) observe(session int64, client netip.Prefix, d time.Duration, failed bool) {
	b := originhealth.Bucket(float64(d) / float64(time.Millisecond))
	h.mu.Lock()
	h.period.Add(session, client, b, failed)
	h.mu.Unlock()
}

// take returns the report since the last one and starts again (requests 0: nothing to say):
// each client's errors and latency samples and each session's requests bounded as the waiting
// room's own gate bounds them (internal/originhealth: one admitted visitor cannot move the
// signals for everyone).
func (h *health) take() (n, errs int64, p95 float64) {
	buckets := make([]int64, originhealth.Buckets)
	h.mu.Lock()
	n, errs = h.period.Settle(buckets)
	h.mu.Unlock()
	var samples int64
	for _, c := range buckets {
		samples += c
	}
	if samples > 0 {
		p95 = originhealth.Quantile(buckets, samples, 0.95)
	}
	return n, errs, math.Round(p95*10) / 10
}

// report sends one report.
func (h *health) report() {
	n, errs, p95 := h.take()
	if n == 0 {
		return
	}
	b, _ := json.Marshal(map[string]any{"requests": n, "errors": errs, "p95_ms": p95}) // numbers cannot fail
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := h.client.Do(req); err == nil {
		resp.Body.Close()
	}
}

func (h *health) run(every time.Duration, clock Clock, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			h.report()
			return
		case <-clock.After(every):
			h.report()
		}
	}
}

// measured is the ResponseWriter of an admitted request: it notes when the status is written.
type measured struct {
	http.ResponseWriter
	start   time.Time
	h       *health
	session int64        // the admission's ticket number
	client  netip.Prefix // the visitor's client (clientaddr.Group)
	status  int
}

// WriteHeader notes the final status: an informational one (103 Early Hints; net/http writes
// a 1xx at once and lets the handler write its real status after) is no answer yet, and a
// 5xx after it must still count. 101 Switching Protocols is final (a WebSocket's upgrade,
// then hijacked), as net/http takes it.
func (m *measured) WriteHeader(code int) {
	if m.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		m.status = code
		m.h.observe(m.session, m.client, time.Since(m.start), code >= 500)
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *measured) Write(b []byte) (int, error) {
	if m.status == 0 {
		m.WriteHeader(http.StatusOK)
	}
	return m.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's Flush and deadlines.
func (m *measured) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// pass serves an admitted request of session (its ticket number), measured when health
// reports are on.
func (g *Gate) pass(w http.ResponseWriter, r *http.Request, next http.Handler, session int64) {
	if g.health == nil {
		next.ServeHTTP(w, r)
		return
	}
	m := &measured{ResponseWriter: w, start: time.Now(), h: g.health, session: session,
		client: clientaddr.Group(g.cfg.ClientAddr(r))}
	defer func() {
		if m.status == 0 { // nothing written: net/http answers 200; a panic counts as an error
			failed := recover()
			m.h.observe(m.session, m.client, time.Since(m.start), failed != nil)
			if failed != nil {
				panic(failed)
			}
		}
	}()
	next.ServeHTTP(m, r)
}
