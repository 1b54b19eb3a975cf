package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGateListenerServesOnlyPublicRoutes: the gate's public listener serves the waiting room's
// public routes (the page, its assets and page.css, the event's view, the challenge, the draw, a ticket's
// join, read, leave and push streams, the JWKS) as the API's listener does, and none of the
// admin API: event writes, close, extend, history, the check and the sale answer 404 there,
// even with the admin key, and change nothing; /v1/audit and /v1/admin/… are the shop's paths.
func TestGateListenerServesOnlyPublicRoutes(t *testing.T) {
	const ev = "gated"
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": 404, "code": "shop_not_found", "detail": "the shop has no " + r.URL.Path})
	}))
	t.Cleanup(shop.Close)
	cfg := backendConfig(t, "embedded")
	gate := withGate(t, &cfg, shop.URL, ev)
	api := start(t, cfg).srv.URL
	require.Equal(t, 201, putEvent(t, api, ev, `{"max_active":5,"page":{"css":"body { color: #111; }"}}`).code)

	// The admin API, with the admin key: 404 from the gate, whatever the method.
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/events/" + ev, `{"max_active":99}`},
		{"PUT", "/v1/events/other", `{"max_active":1}`},
		{"PATCH", "/v1/events/" + ev, `{"max_active":99}`},
		{"DELETE", "/v1/events/" + ev, ""},
		{"POST", "/v1/events/" + ev + "/close", ""},
		{"POST", "/v1/events/" + ev + "/extend", `{"by_s":60}`},
		{"GET", "/v1/events/" + ev + "/history", ""},
		{"GET", "/v1/events/" + ev + "/admission", ""},
		{"POST", "/v1/events/" + ev + "/holds", `{"quantity":1}`},
		{"GET", "/v1/events/" + ev + "/seats", ""},
		{"GET", "/v1/gate/check", ""},
		{"PUT", "/x/../v1/events/" + ev, `{"max_active":99}`},
	} {
		r := call(t, gate, c.method, c.path, adminKey, c.body)
		require.Equal(t, 404, r.code, "%s %s: %s", c.method, c.path, r.raw)
		require.Equal(t, "not_found", str(r, "code"), "%s %s", c.method, c.path)
	}
	// Outside the waiting room's paths, the admin routes are the shop's paths.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/audit"}, {"GET", "/v1/admin/keys"}, {"POST", "/v1/admin/keys"}, {"DELETE", "/v1/admin/keys/ops"},
		{"GET", "/v1/events"}, {"GET", "/v1/instances"}, {"GET", "/v1/events/" + ev + "/../../audit"},
	} {
		r := call(t, gate, c.method, c.path, adminKey, "")
		require.Equal(t, 404, r.code, "%s %s", c.method, c.path)
		require.Equal(t, "shop_not_found", str(r, "code"), "%s %s", c.method, c.path)
	}
	// Nothing changed, and the API's own listener still serves the admin API.
	got := call(t, api, "GET", "/v1/events/"+ev, "", "")
	require.EqualValues(t, 5, got.body["max_active"], got.raw)
	require.Equal(t, 404, call(t, api, "GET", "/v1/events/other", "", "").code)
	require.Equal(t, 200, call(t, api, "GET", "/v1/events/"+ev+"/history", adminKey, "").code)

	// The public routes answer on the gate as on the API.
	for _, path := range []string{"/e/" + ev, "/e/" + ev + "/page.css", "/assets/room.js", "/v1/events/" + ev, "/v1/events/" + ev + "/challenge",
		"/v1/events/" + ev + "/draw", "/.well-known/jwks.json"} {
		viaGate, viaAPI := call(t, gate, "GET", path, "", ""), call(t, api, "GET", path, "", "")
		require.Equal(t, viaAPI.code, viaGate.code, "GET %s: %s", path, viaGate.raw)
		require.NotEqual(t, 404, viaGate.code, "GET %s", path)
	}
	joined := call(t, gate, "POST", "/v1/events/"+ev+"/tickets", "", "")
	require.Equal(t, 201, joined.code, joined.raw)
	ticket := str(joined, "ticket_id")
	require.Equal(t, 200, call(t, gate, "GET", "/v1/events/"+ev+"/tickets/"+ticket, "", "").code)
	ws := "/v1/events/" + ev + "/tickets/" + ticket + "/ws" // not a handshake: the hub's 426
	require.Equal(t, "websocket_required", str(call(t, gate, "GET", ws, "", ""), "code"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", gate+"/v1/events/"+ev+"/tickets/"+ticket+"/events", nil)
	require.NoError(t, err)
	sse, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, sse.StatusCode)
	require.Equal(t, "text/event-stream", sse.Header.Get("Content-Type"))
	_, _ = io.ReadAll(io.LimitReader(sse.Body, 1)) // the stream is open
	cancel()
	sse.Body.Close()
	require.Equal(t, 204, call(t, gate, "DELETE", "/v1/events/"+ev+"/tickets/"+ticket, "", "").code)
}
