package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

const (
	testAdminKey = "gate-test-admin-key-0123456789abcdef"
	testTokenKey = "gate-test-token-key-0123456789abcdef"
)

// gateFile is the gate file of the tests: the shop at origin, /checkout and /api/cart protected
// by testEvent, /static/ and /healthz bypassed.
func gateFile(t *testing.T, origin string) gateway.File {
	t.Helper()
	f, err := gateway.Parse("test.yaml", []byte(`
sites:
  - origin: `+origin+`
    protect:
      - event: `+testEvent+`
        paths: [/checkout, /api/cart]
bypass:
  paths: [/static/, /healthz]
  secret: monitor-secret-0123456789
`))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// gated is an instance with its gate served by httptest.
type gated struct {
	*app.App
	gate *httptest.Server
	api  *httptest.Server
}

// startGated starts an instance (embedded, or on Redis and PostgreSQL) with the gate file f,
// and creates testEvent with max_active maxActive.
func startGated(t *testing.T, deployment string, f gateway.File, maxActive int64) *gated {
	t.Helper()
	cfg := app.Config{AdminKey: testAdminKey, TokenKey: testTokenKey, Gate: &f,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	switch deployment {
	case "embedded":
		cfg.DatabaseURL = sqltest.SQLite(t)
	case "redis":
		cfg.Redis = redistest.Client(t)
		cfg.RedisPrefix = redistest.Prefix(t, cfg.Redis)
		cfg.DatabaseURL = sqltest.Postgres(t)
	}
	ctx := context.Background()
	a, err := app.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	g := &gated{App: a, gate: httptest.NewServer(a.Gate), api: httptest.NewServer(a.Handler())}
	t.Cleanup(func() {
		_ = a.Hub.Stop(context.Background())
		g.gate.Close()
		g.api.Close()
	})
	// The crowd comes from one loopback address: no limit per client (TestGateJoinLimit sets one).
	if _, _, err := a.Registry.Put(ctx, event.Event{ID: testEvent, Name: "Spring sale", MaxActive: maxActive,
		SessionTTL: event.DefaultSessionTTL, ClaimTTL: event.DefaultClaimTTL,
		Limits: event.Limits{JoinsPerClient: event.MaxLimit}}, 0); err != nil {
		t.Fatal(err)
	}
	return g
}

// serving reads the line's serving counter from the store.
func (g *gated) serving() int64 {
	st, err := g.Backend.Line.Stats(context.Background(), testEvent)
	if err != nil {
		return -1
	}
	return st.Serving
}

// TestGateCrowd: 2,000 visitors to /checkout through the gate, max_active 50 (see runCrowd),
// on both deployments.
func TestGateCrowd(t *testing.T) {
	for _, dep := range []string{"embedded", "redis"} {
		t.Run(dep, func(t *testing.T) {
			s := newShop(t)
			g := startGated(t, dep, gateFile(t, s.srv.URL), 50)
			s.serving = g.serving
			runCrowd(t, front{base: g.gate.URL, serving: g.serving}, s, 2000, 50, 2*time.Minute)
		})
	}
}

// TestGateJoinLimit: a bot that drops the gate's cookie joins again on every request, from
// its own address (127.0.0.2); past the event's joins_per_client it gets 429 rate_limited
// with Retry-After and no ticket, while a person on another address (127.0.0.3) still gets
// a place, right behind the bot's few tickets, on both deployments.
func TestGateJoinLimit(t *testing.T) {
	for _, dep := range []string{"embedded", "redis"} {
		t.Run(dep, func(t *testing.T) {
			s := newShop(t)
			g := startGated(t, dep, gateFile(t, s.srv.URL), 1)
			s.serving = g.serving
			ctx := context.Background()
			e, ok := g.Registry.Cached(testEvent)
			require.True(t, ok)
			e.Limits = event.Limits{JoinsPerClient: 3, JoinWindow: time.Hour}
			_, _, err := g.Registry.Put(ctx, e, 0)
			require.NoError(t, err)

			from := func(ip string) *http.Client {
				d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
				return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second,
					CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			}
			get := func(c *http.Client) (*http.Response, map[string]any) {
				req, err := http.NewRequest("GET", g.gate.URL+"/api/cart", nil)
				require.NoError(t, err)
				req.Header.Set("Accept", "application/json")
				resp, err := c.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				var body map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&body) // the shop's answer to an admitted visitor may not be JSON
				return resp, body
			}
			bot := from("127.0.0.2")
			codes := map[int]int{}
			var last map[string]any
			var lastResp *http.Response
			for range 10 { // no cookie jar: every request joins again
				lastResp, last = get(bot)
				codes[lastResp.StatusCode]++
			}
			// One admitted (max_active 1: the first join is let in), two waiting, then refused.
			require.Equal(t, map[int]int{200: 1, 503: 2, 429: 7}, codes, "statuses of the bot's requests")
			require.Equal(t, "rate_limited", last["code"])
			require.NotEmpty(t, lastResp.Header.Get("Retry-After"))
			require.Nil(t, gateCookie(lastResp), "a refused join sets no cookie")

			resp, body := get(from("127.0.0.3"))
			require.Equal(t, 503, resp.StatusCode, "%v", body)
			require.Equal(t, "waiting_room", body["code"])
			require.EqualValues(t, 4, body["number"], "the person's ticket comes right after the bot's three")
			st, err := g.Backend.Line.Stats(ctx, testEvent)
			require.NoError(t, err)
			require.EqualValues(t, 3, st.Waiting, "the refused joins took no place in line")
		})
	}
}
