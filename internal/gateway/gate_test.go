package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

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
		a.Hub.Stop()
		g.gate.Close()
		g.api.Close()
	})
	if _, _, err := a.Registry.Put(ctx, event.Event{ID: testEvent, Name: "Spring sale", MaxActive: maxActive,
		SessionTTL: event.DefaultSessionTTL, ClaimTTL: event.DefaultClaimTTL}); err != nil {
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
