package gate_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/gate"
	"github.com/waitroom/waitroom/internal/token"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a gate.Clock that moves only when told to. Every After call is announced on
// timers, so a test knows when the key loop has finished a fetch and what it waits for next.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	timers  chan time.Duration
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, timers: make(chan time.Duration, 1000)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	c.timers <- d
	return ch
}

// Advance moves the clock by d and fires the waits that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// nextTimer returns the duration of the next After call, failing the test if none comes
// within 10 s of real time.
func (c *fakeClock) nextTimer(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.timers:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the key loop did not wait for its next fetch within 10 s")
		return 0
	}
}

// noTimer checks that no After call is pending announcement (the loop is not spinning).
func (c *fakeClock) noTimer(t *testing.T) {
	t.Helper()
	select {
	case d := <-c.timers:
		t.Fatalf("unexpected wait of %v: the key loop fetched again", d)
	default:
	}
}

// fakeRoom is a waiting room as the gate sees it: a JWK Set and the online admission check.
type fakeRoom struct {
	srv *httptest.Server

	mu           sync.Mutex
	jwks         []byte
	jwksStatus   int
	cacheControl string
	admission    map[string]int // token, or token@client, -> status of the online check; 200 when absent
	clients      []string       // the ?client= of every online check, in order

	jwksHold chan struct{} // when set (before the first fetch), key-set answers wait for it to close

	fetches atomic.Int64 // GET /.well-known/jwks.json
	checks  atomic.Int64 // GET /v1/events/{id}/admission
}

func newFakeRoom(t *testing.T, a *token.Admissions) *fakeRoom {
	t.Helper()
	r := &fakeRoom{jwks: a.JWKS(), jwksStatus: 200, cacheControl: "public, max-age=300", admission: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, _ *http.Request) {
		r.fetches.Add(1)
		if r.jwksHold != nil {
			<-r.jwksHold
		}
		r.mu.Lock()
		body, status, cc := r.jwks, r.jwksStatus, r.cacheControl
		r.mu.Unlock()
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		if status == 200 {
			_, _ = w.Write(body)
		}
	})
	mux.HandleFunc("GET /v1/events/{event_id}/admission", func(w http.ResponseWriter, req *http.Request) {
		r.checks.Add(1)
		tok := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
		client := req.URL.Query().Get("client")
		r.mu.Lock()
		r.clients = append(r.clients, client)
		status, ok := r.admission[tok+"@"+client]
		if !ok {
			status, ok = r.admission[tok]
		}
		r.mu.Unlock()
		if !ok {
			status = 200
		}
		w.WriteHeader(status)
	})
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *fakeRoom) setJWKS(body []byte, status int, cacheControl string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jwks, r.jwksStatus, r.cacheControl = body, status, cacheControl
}

func (r *fakeRoom) setAdmission(tok string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admission[tok] = status
}

// keys derives a token key from a secret, as the waiting room does from WAITROOM_TOKEN_KEY.
func keys(t *testing.T, secret string) token.Keys {
	t.Helper()
	k, err := token.DeriveKeys(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	t0      = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	secretA = "gate-test-secret-a-0123456789"
	secretB = "gate-test-secret-b-0123456789"
)

// mint returns an admission token of ticket number num in event, ending at exp, issued at t0.
func mint(t *testing.T, a *token.Admissions, event string, num int64, exp time.Time) string {
	t.Helper()
	tok, err := a.Mint(event, "ticket-"+strconv.FormatInt(num, 10), num, exp, t0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newGate starts a gate on room's keys with clock, after its first key fetch completed
// (the clock's first timer is consumed and returned).
func newGate(t *testing.T, room *fakeRoom, clock *fakeClock, edit func(*gate.Config)) (*gate.Gate, time.Duration) {
	t.Helper()
	cfg := gate.Config{
		WaitingRoomURL: room.srv.URL,
		EventID:        "concert",
		Logger:         slog.New(slog.NewTextHandler(tWriter{t}, nil)),
		Clock:          clock,
	}
	if edit != nil {
		edit(&cfg)
	}
	g, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g, clock.nextTimer(t)
}

// seen is what the protected handler saw.
type seen struct {
	mu     sync.Mutex
	calls  int
	admits []gate.Admission
}

func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := gate.FromContext(r.Context())
		s.mu.Lock()
		s.calls++
		if ok {
			s.admits = append(s.admits, a)
		}
		s.mu.Unlock()
		_, _ = io.WriteString(w, "protected")
	})
}

// do sends req through h and returns the recorded answer.
func do(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func apiRequest(tok string) *http.Request {
	req := httptest.NewRequest("GET", "http://shop.example/api/cart", nil)
	req.Header.Set("Accept", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req
}

func pageRequest(target string) *http.Request {
	req := httptest.NewRequest("GET", target, nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	return req
}

// problem decodes an application/problem+json answer.
func problem(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, rec.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p
}
